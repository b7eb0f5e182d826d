"""A study's trials version: one more in every transaction that writes one of its trials.

What readers derive from every trial of a study (its counts per state and best value: a study
view, a best view, an export) is cached on (study, `studies.trials_version`) by
study/versioned.py, so it is computed once per change instead of once per read. For that the
version must change whenever what they read does:

- a trial added or changed through the ORM (created, marked lost, charged as a crash, marked
  retried) is seen by the `before_flush` hook below, whatever code changed it;
- `TrialRepo.finish` writes with an UPDATE statement, which no flush sees: it calls `bump`.

Heartbeats (`TrialRepo.heartbeat`) change nothing a reader derives and do not bump it. The
UPDATE takes the study row's lock until the transaction ends, so versions go up in commit
order: a reader that sees version v sees every trial write of the transactions up to v.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import event, update
from sqlalchemy.orm import Session

from autotuner.storage.models import Study, Trial

_BUMPED = "autotuner_trials_bumped"  # Session.info: the studies bumped in this transaction


def bump(session: Session, study_ids: Iterable[str]) -> None:
    """The studies' trials version up by one, once per transaction (a Core UPDATE on the
    session's connection: it runs inside a flush without starting another)."""
    done: set[str] = session.info.setdefault(_BUMPED, set())
    todo = sorted(set(study_ids) - done)  # in id order: two writers lock rows alike
    if not todo:
        return
    session.connection().execute(
        update(Study)
        .where(Study.id.in_(todo))
        .values(trials_version=Study.trials_version + 1)
        .execution_options(synchronize_session=False)
    )
    done.update(todo)


@event.listens_for(Session, "before_flush")
def _trials_written(session: Session, _context: Any, _instances: Any) -> None:
    studies = {obj.study_id for obj in session.new if isinstance(obj, Trial)}
    studies |= {
        obj.study_id
        for obj in session.dirty
        if isinstance(obj, Trial) and session.is_modified(obj, include_collections=False)
    }
    studies |= {obj.study_id for obj in session.deleted if isinstance(obj, Trial)}
    if studies:
        bump(session, studies)


@event.listens_for(Session, "after_transaction_end")
def _transaction_over(session: Session, transaction: Any) -> None:
    if transaction.parent is None:  # the outermost: the next one bumps again
        session.info.pop(_BUMPED, None)
