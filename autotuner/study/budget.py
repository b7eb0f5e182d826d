"""A study's budget: trials launched and minutes since it started."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from autotuner.search.end_time import TimeLeft
from autotuner.types import utcnow


@dataclass(frozen=True)
class Budget:
    """`max_trials` counts launched trials, never retries or pruned proposals; `max_minutes`
    counts wall-clock time since the study first started (a restart does not reset it).

    `clock`: what "now" is; a replay on simulated time passes the clock its executor advances
    by each answered trial's wall (executors/replay.py `SimulatedClock`). `paused_s`: the
    seconds the study waited for its cluster or its GPUs (study/pause.py), not spent."""

    max_trials: int | None
    max_minutes: float | None
    started_at: dt.datetime
    clock: Callable[[], dt.datetime] = field(default=utcnow, compare=False)
    paused_s: Callable[[], float] = field(default=lambda: 0.0, compare=False)

    def elapsed_s(self) -> float:
        started = self.started_at
        started = started if started.tzinfo else started.replace(tzinfo=dt.UTC)
        return (self.clock() - started).total_seconds() - self.paused_s()

    def time_left(self) -> TimeLeft | None:
        """Elapsed and budgeted seconds; None without a time budget."""
        if self.max_minutes is None:
            return None
        return TimeLeft(self.elapsed_s(), self.max_minutes * 60)

    def spent(self, launched: int, retries_pending: bool) -> bool:
        if self.max_minutes is not None and self.elapsed_s() >= self.max_minutes * 60:
            return True
        if self.max_trials is not None:
            # Retries do not count: a lost worker must not eat the user's budget.
            return launched >= self.max_trials and not retries_pending
        return False
