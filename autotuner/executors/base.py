"""The executor contract the coordinator drives: submit trials, collect finished ones.

An executor owns *where* a trial runs; the coordinator owns *what* runs and what it means.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from autotuner.spec import Fingerprint, TrialConfig, TrialResult


class ExecutorUnavailable(RuntimeError):
    """The cluster did not answer (Ray's head is unreachable, a call timed out).

    Not a property of any trial or study: the scheduler waits and tries again, like a database
    outage, instead of failing the study that happened to be asking."""


@dataclass(frozen=True)
class Completed:
    """One finished trial: the handle `submit` returned, its result, and where it ran.

    `lost`: the cluster failed under the trial (a Ray system error: its worker or node died,
    the raylet or the GCS went away), so the result (an `infra` failure saying so) tells
    nothing about the config; the coordinator runs it again without charging the config."""

    handle: str
    result: TrialResult
    worker: str | None = None
    lost: bool = False


@dataclass(frozen=True)
class Target:
    """What the trials will run on, as far as the control plane can tell before launching."""

    device_type: str  # "cuda" or "cpu"
    gpus_total: int
    device_name: str | None = None
    compute_capability: tuple[int, int] | None = None
    memory_gib: float | None = None

    @classmethod
    def from_fingerprint(cls, fp: Fingerprint) -> Target:
        cc = None
        if fp.compute_capability:
            major, minor = fp.compute_capability.split(".")
            cc = (int(major), int(minor))
        return cls(
            fp.device_type,
            fp.device_count if fp.device_type == "cuda" else 0,
            fp.device_name,
            cc,
            fp.memory_total_gib,
        )


class Executor(Protocol):
    def target(self) -> Target:
        """The hardware trials run on now (GPU count; device name and capability when known).

        It follows the cluster: a GPU node that joins later shows up here."""
        ...

    def free_slots(self, gpus_per_trial: int) -> int:
        """How many more trials of this size can start now without sharing a device."""
        ...

    def submit(self, config: TrialConfig) -> str:
        """Start one trial in a fresh process; returns a handle. Raises ExecutorUnavailable if
        the cluster did not take it (then nothing runs)."""
        ...

    def collect(self, timeout_s: float) -> list[Completed]:
        """Finished trials since the last call, waiting up to timeout_s for the first."""
        ...

    def cancel(self, handle: str) -> None:
        """Stop a running trial (its result, if any, is discarded)."""
        ...

    def running(self) -> list[str]:
        """Handles of trials submitted and not yet collected."""
        ...

    def health(self) -> str | None:
        """Why no trial can run now (one line, for /healthz and the studies' pause), or None
        when trials can run. Checks the cluster connection and reconnects one that died (a
        restarted Ray head); while this says why, `free_slots` is 0."""
        ...

    def close(self) -> None:
        """Release what the executor itself started (a local Ray cluster and its processes).
        Called once, when its owner stops; running trials were cancelled before."""
        ...
