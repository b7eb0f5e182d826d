"""What a study's trials came to, read for the end of its search (study/ending.py): whether
any trial measured something, and else how its trials failed, grouped.

Runs inside the caller's transaction and never commits (see common.py)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from autotuner.purpose import END_CHECKS
from autotuner.storage.models import Trial, TrialState


class OutcomeReads:
    def __init__(self, session: Session) -> None:
        self.session = session

    def measured_count(self, study_id: str) -> int:
        """The study's completed trials other than the end checks: those that measured."""
        return (
            self.session.scalar(
                select(func.count())
                .select_from(Trial)
                .where(Trial.study_id == study_id, Trial.state == TrialState.COMPLETE.value)
                .where(Trial.purpose.not_in(END_CHECKS))
            )
            or 0
        )

    def failure_groups(self, study_id: str) -> list[tuple[bool, str | None, int, int]]:
        """(pruned, error class, count, first trial number) of the study's trials that are no
        re-run, pruned ones last, then the most frequent first, then the earliest: a pruned
        proposal repeats what a trial that ran taught the screen."""
        pruned = Trial.state == TrialState.PRUNED.value
        rows = self.session.execute(
            select(pruned, Trial.error_class, func.count(), func.min(Trial.number))
            .where(Trial.study_id == study_id, Trial.retry_of.is_(None))
            .group_by(pruned, Trial.error_class)
            .order_by(pruned, func.count().desc(), func.min(Trial.number))
        )
        return [(bool(p), error_class, int(n), int(first)) for p, error_class, n, first in rows]

    def error_message(self, study_id: str, number: int) -> str | None:
        """Trial `number`'s error message (its column alone)."""
        return self.session.scalar(
            select(Trial.error_message).where(Trial.study_id == study_id, Trial.number == number)
        )
