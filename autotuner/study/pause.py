"""A study that cannot launch for a reason outside it: it waits, says why, and the wait is
not spent from its time budget.

Two reasons: the executor cannot run trials at all (`Executor.health`: the Ray head or its
GCS is down, the connection is being re-made), or a `cuda` study finds fewer GPUs in the
cluster than a trial needs (the GPU node left): it never runs a trial without its GPUs (it
would measure the CPU and call it the GPU's number), it waits for them.

The reason is stored on the study row (`studies.waiting`: `status`, the API and the dashboard
show it) while it lasts; the seconds waited add up in `studies.paused_s`, which the time
budget (`--minutes`) leaves out: a minute in which no trial could run measured nothing, so it
does not count as a minute of the search. A trial the failure cut short stays spent (at most
one trial's wall per slot): crediting it too would need its share of the wall, and the
budget is a stop for launches, never a measurement.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from autotuner.executors.base import Executor, Target

log = logging.getLogger(__name__)


class WaitingForGpus(RuntimeError):
    """A GPU study taken up while its cluster has no GPU: it waits (the study row says why)
    and is taken up again later; nothing about it failed."""


def gpus_missing(study_device: str | None, gpus_per_trial: int, target: Target) -> str | None:
    """Why a study on `study_device` cannot launch on `target`'s GPUs now, or None."""
    if study_device != "cuda":
        return None
    have = target.gpus_total if target.device_type == "cuda" else 0
    if have >= gpus_per_trial:
        return None
    return (
        f"waiting for GPUs: the cluster has {have} of the {gpus_per_trial} a trial of this "
        "GPU study needs (a GPU node left?); no trial runs without them, and the study goes "
        "on when a GPU node joins"
    )


class Pause:
    """Whether a study waits, why, and for how long in all (this run and the stored past)."""

    def __init__(
        self,
        store: Callable[[str | None, float], None],
        paused_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store  # writes (waiting, paused_s) to the study row
        self._clock = clock
        self.paused_s = paused_s  # finished waits, stored
        self.reason: str | None = None
        self._since: float | None = None

    def resume(self, reason: str | None, paused_s: float) -> None:
        """Take up what the study row says (a coordinator that starts it)."""
        self.paused_s, self.reason = paused_s, reason
        self._since = None if reason is None else self._clock()

    def seconds(self) -> float:
        """Seconds this study has waited, the ongoing wait included."""
        ongoing = 0.0 if self._since is None else self._clock() - self._since
        return self.paused_s + ongoing

    def update(self, reason: str | None) -> None:
        """The reason now (None: it can launch); stored when it changes."""
        if reason == self.reason:
            return
        now = self._clock()
        total = self.seconds()
        self._store(reason, total)  # first: a failed write leaves the old state to retry
        if reason is None:
            log.warning("resuming after %.0f s: %s", total - self.paused_s, self.reason)
        else:
            log.warning("waiting: %s", reason)
        # The wait so far is folded into paused_s; a new reason's wait counts from now.
        self.paused_s, self.reason = total, reason
        self._since = None if reason is None else now

    def check(self, executor: Executor, study_device: str | None, gpus_per_trial: int) -> None:
        """Ask the executor and the cluster's GPUs, and update."""
        why = executor.health()
        if why is None:
            why = gpus_missing(study_device, gpus_per_trial, executor.target())
        self.update(why)
