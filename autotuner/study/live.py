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

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session, defer

from autotuner.options import StudyOptions
from autotuner.purpose import END_CHECKS
from autotuner.search.objective import Objective
from autotuner.spec import FailureClass
from autotuner.storage.models import Study, StudyStatus, Trial, TrialState
from autotuner.storage.session import Database
from autotuner.study.columns import load_json
from autotuner.study.gc_pause import gc_paused
from autotuner.study.recommend import recommend


def recommendation_rows(s: Session, study_id: str) -> list[Trial]:
    """The trials a recommendation reads: the measured ones (the candidates) and the end-of-study
    checks in any state (the numerics parity trials, the one-GPU reference). Failed, pruned and
    running search trials cannot change it, so they are not loaded.

    Two statements however many trials: the rows without their JSON (the ranking, the global
    batch, the memory and input-pipeline entries and whether a trial stopped early read
    columns: study/columns.py), then the JSON of the few end checks, whose results and configs
    the checks read. The winner's JSON is read by `recommend`, in one more."""
    rows = list(
        s.scalars(
            select(Trial)
            .options(defer(Trial.config), defer(Trial.result))
            .where(
                Trial.study_id == study_id,
                or_(Trial.state == TrialState.COMPLETE.value, Trial.purpose.in_(END_CHECKS)),
            )
            .order_by(Trial.number)
        )
    )
    load_json([t for t in rows if t.purpose in END_CHECKS])
    return rows


def end_of_study_rows(s: Session, study_id: str) -> list[Trial]:
    """Every trial of the study, for the final recommendation and its evidence: without their
    JSON but for the end checks' (the checks read them) and the out-of-memory trials' (the
    cost model's lower bound is only there; search/evidence.py). Two statements; the rows stay
    readable once the transaction is over, so the evidence is computed outside it."""
    rows = list(
        s.scalars(
            select(Trial)
            .options(defer(Trial.config), defer(Trial.result))
            .where(Trial.study_id == study_id)
            .order_by(Trial.number)
        )
    )
    oom = FailureClass.OOM.value
    load_json(
        [
            t
            for t in rows
            if t.purpose in END_CHECKS or (t.error_class == oom and t.state != TrialState.PRUNED)
        ]
    )
    return rows


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
    query = update(Study).where(
        Study.id == study_id,
        Study.status.in_([StudyStatus.QUEUED.value, StudyStatus.RUNNING.value]),
    )
    if owner is not None:
        query = query.where(Study.owner == owner)
    with db.session() as s:
        s.execute(
            query.values(
                best_trial_number=rec["trial_number"] if rec else None, recommendation=rec
            ).execution_options(synchronize_session=False)
        )
    return rec
