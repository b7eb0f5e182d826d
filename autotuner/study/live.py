"""The live recommendation: computed when a trial finishes, stored on the study row.

`/best`, `status` and the dashboard read `studies.recommendation` and never recompute it per
request (at 10,000 trials that took seconds per read, issue 16). The coordinator calls
`store_live_best` after each finished trial's result is committed: the rows are read in one
read-only transaction, the recommendation is computed with no transaction open, and stored in a
short one fenced by the coordinator's lease (a coordinator that lost its study writes nothing).
A crash in between leaves the previous recommendation, one trial behind; the next coordinator
stores a fresh one when it takes the study (`StudyRunner.start`).

At the end of the study `lifecycle.StudyLease.finish` stores the final one, with its evidence.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from autotuner.options import StudyOptions
from autotuner.search.objective import Objective
from autotuner.storage import trial_rows
from autotuner.storage.models import Trial
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.study.gc_pause import gc_paused
from autotuner.study.recommend import recommend


def recommendation_rows(s: Session, study_id: str) -> list[Trial]:
    """The trials a recommendation reads, as plain rows (storage/trial_rows.py): the measured
    ones and the end-of-study checks with their JSON. Two statements however many trials."""
    return trial_rows.recommendation_rows(s, study_id)


def end_of_study_rows(s: Session, study_id: str) -> list[Trial]:
    """Every trial of the study, for the final recommendation and its evidence, as plain rows
    with the JSON the evidence reads (storage/trial_rows.py); readable once the transaction
    is over, so the evidence is computed outside it."""
    return trial_rows.end_of_study_rows(s, study_id)


def live_best(
    db: Database, study_id: str, objective: Objective, options: StudyOptions | None = None
) -> dict[str, Any] | None:
    """The recommendation as the study's trials stand now (without the end-of-study evidence).
    Computed in a read-only transaction (no lock; the deferred configs load on demand)."""
    with db.read() as s:
        return live_best_in(s, study_id, objective, options)


def live_best_in(
    s: Session, study_id: str, objective: Objective, options: StudyOptions | None = None
) -> dict[str, Any] | None:
    """live_best in a read transaction the caller has open already (a read that needs the
    study too: one transaction, one connection), with the cyclic garbage collector paused
    (study/gc_pause.py)."""
    with gc_paused():
        return recommend(recommendation_rows(s, study_id), objective, options=options)


def store_live_best(
    db: Database,
    study_id: str,
    objective: Objective,
    options: StudyOptions | None = None,
    *,
    owner: str | None = None,
) -> dict[str, Any] | None:
    """Compute the live recommendation and store it on a study still queued or running; with
    `owner`, only while that coordinator holds the study's lease. Returns what was computed."""
    rec = live_best(db, study_id, objective, options)
    with db.session() as s:
        StudyRepo(s).store_live(study_id, rec, owner=owner)
    return rec
