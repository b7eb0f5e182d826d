"""What a running study tells its watcher (a progress bar, a log): one `Event` per change."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Event:
    """Something a watcher (progress bar, log) may want to show."""

    # launched | finished | pruned | retry | lost | done; search_over and remeasure_cut (the
    # search or the re-measurements stopped to leave the end checks their time: `message`)
    kind: str
    trial_number: int | None = None
    params: dict[str, Any] | None = None
    state: str | None = None
    tokens_per_s: float | None = None
    message: str | None = None
    purpose: str | None = None  # a finished trial's: seed, search, remeasure, proxy, an end check
    # A finished trial that failed and runs once more: its retry is the same trial of the budget
    # (`max_trials` counts it once), so a watcher counts the retry's end, not this one.
    retried: bool = False


OnEvent = Callable[[Event], None]
