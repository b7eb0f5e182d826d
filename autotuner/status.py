"""A study's statuses and a trial's states, in a module of their own so that the CLI can tell
an ended study, and a read count its trials, without importing SQLAlchemy
(`autotuner.storage.models` re-exports them for the tables)."""

from __future__ import annotations

from enum import StrEnum


class StudyStatus(StrEnum):
    QUEUED = "queued"  # submitted, no coordinator has picked it up yet
    RUNNING = "running"
    COMPLETED = "completed"  # budget spent or converged; has a recommendation if any trial ran
    CANCELLED = "cancelled"
    FAILED = "failed"  # the study itself could not run (e.g. every trial failed for infra)
    # Stopped by its user (Ctrl-C or SIGTERM of `tune`) or a service's drain: its running
    # trials were cancelled and marked so; nothing runs it until `autotuner resume` asks.
    INTERRUPTED = "interrupted"


class TrialState(StrEnum):
    RUNNING = "running"  # dispatched; heartbeat_at moves while it runs
    COMPLETE = "complete"  # measured
    INFEASIBLE = "infeasible"  # a config failure (oom, unsupported, compile_error, numerics)
    FAILED = "failed"  # an infra failure (timeout, crash, infra); may be retried once
    LOST = "lost"  # its coordinator died or its heartbeat stopped; retried once
    PRUNED = "pruned"  # never launched: rules or the cost model ruled it out

    @property
    def finished(self) -> bool:
        return self != TrialState.RUNNING


# A study in one of these is over: no coordinator takes it again.
ENDED_STATUSES = frozenset({StudyStatus.COMPLETED, StudyStatus.CANCELLED, StudyStatus.FAILED})
# Nothing runs a study in one of these now (a watcher stops watching): the ended ones, and an
# interrupted one until it is resumed.
STOPPED_STATUSES = ENDED_STATUSES | {StudyStatus.INTERRUPTED}
