"""What a running study tells its watcher (a progress bar, a log): one `Event` per change."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Event:
    """Something a watcher (progress bar, log) may want to show."""

    # launched | finished | pruned | retry | lost | done; search_over and remeasure_cut (the
    # search or the re-measurements stopped to leave the end checks their time: `message`);
    # checks_cut (the end checks would end past the time budget and did not start); waiting
    # (the study launches nothing: its cluster is down or its GPUs left, `message`), resumed;
    # carried (its memory model starts from earlier studies' trials, `message`)
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
    # A finished trial's knobs that ran where they differ from `params` (InFlight.ran), and a
    # parity trial's loss per step: what an end check did, which its tokens/s does not say.
    ran: dict[str, Any] = field(default_factory=dict)
    loss_curve: list[float] | None = None


OnEvent = Callable[[Event], None]
