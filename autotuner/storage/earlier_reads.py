"""Earlier studies' trials, read for a new study's memory model (search/memory_history.py):
the studies created before it, and their trials that ended before it, newest first.

Runs inside the caller's transaction and never commits (see common.py)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from autotuner.purpose import END_CHECKS
from autotuner.storage.models import Study, Trial, TrialState


class EarlierReads:
    def __init__(self, session: Session) -> None:
        self.session = session

    def studies(
        self, *, before: dt.datetime, gpus_per_trial: int, limit: int
    ) -> list[tuple[str, dict[str, Any]]]:
        """(id, model spec) of the newest `limit` studies created before `before` whose trials
        ask for `gpus_per_trial` GPUs each."""
        rows = self.session.execute(
            select(Study.id, Study.model_spec)
            .where(Study.created_at < before, Study.gpus_per_trial == gpus_per_trial)
            .order_by(Study.created_at.desc())
            .limit(limit)
        ).all()
        return [(sid, spec) for sid, spec in rows]

    def ended_measurements(
        self, study_ids: list[str], *, before: dt.datetime, limit: int
    ) -> list[tuple[str, int, dict[str, Any], dict[str, Any] | None]]:
        """(study id, number, config, result) of the newest `limit` trials of those studies
        that ended before `before`, measured or failed for their config (complete,
        infeasible), end checks and proxies left out."""
        if not study_ids:
            return []
        rows = self.session.execute(
            select(Trial.study_id, Trial.number, Trial.config, Trial.result)
            .where(
                Trial.study_id.in_(study_ids),
                Trial.state.in_((TrialState.COMPLETE.value, TrialState.INFEASIBLE.value)),
                Trial.purpose.not_in(END_CHECKS),
                Trial.finished_at < before,
            )
            .order_by(Trial.finished_at.desc())
            .limit(limit)
        ).all()
        return [(sid, number, config, result) for sid, number, config, result in rows]
