"""Where a trial's wall time goes: one timestamp per phase, in the result (`phases_s`).

    start       the launcher's spawn (or fork) -> the trial's first line (interpreter start)
    imports     torch, torch._dynamo, the models (a forked trial has them already)
    setup       device, fingerprint, process group, threads, memory cap
    build       support checks, model, optimizer, compile wrapper, data (its parts: the
                result's build_parts_s)
    parity      a headroom check's numerics parity steps, before its warm-up (their first
                step compiles, then first_step does not)
    first_step  the first optimizer step: torch.compile's tracing and codegen happen here
    warmup      the rest of the warm-up
    measure     the timed repeats (the only phase counted in throughput)
    checks      after the repeats: memory peaks, the result
    eval        the headroom check's evaluation pass (a forward-only recompile under compile)
    checkpoint  the headroom check's checkpoint save (serialized off the GPU, not to disk)
    exit        result written -> the process gone (interpreter teardown), from the launcher

`overhead_s` = wall_s - measure - compile_s: what is neither measurement nor compile, the part
a cheaper trial start can cut (bench/trial_overhead.py reports it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from autotuner.spec import TrialResult

# The launcher's wall-clock time (time.time()) just before it started the trial's process.
SPAWNED_AT_ENV = "AUTOTUNER_TRIAL_SPAWNED_AT"


class Clock:
    """Adds the time since the previous mark to a phase of `phases` (a result's phases_s).

    `sync`, when given, runs before each mark: a device synchronise, so that the kernels a
    part queued count in that part, not in whichever later part first waits for them."""

    def __init__(
        self, phases: dict[str, float], since: float, sync: Callable[[], None] | None = None
    ) -> None:
        self.phases = phases
        self._last = since
        self._sync = sync

    def mark(self, name: str) -> None:
        if self._sync is not None:
            self._sync()
        now = time.perf_counter()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self._last, 4)
        self._last = now

    def split(self, name: str, part: str, seconds: float) -> None:
        """Move `seconds` of phase `name` into phase `part` (e.g. the first step of warm-up)."""
        seconds = min(seconds, self.phases.get(name, 0.0))
        self.phases[name] = round(self.phases.get(name, 0.0) - seconds, 4)
        self.phases[part] = round(self.phases.get(part, 0.0) + seconds, 4)


def start_phase(started_at: float) -> dict[str, float]:
    """{"start": seconds from the launcher's spawn to `started_at`} when a launcher says when
    it spawned this process; {} for an in-process caller."""
    spawned = os.environ.get(SPAWNED_AT_ENV)
    if not spawned:
        return {}
    try:
        return {"start": round(max(0.0, started_at - float(spawned)), 4)}
    except ValueError:
        return {}


def finish(result: TrialResult, wall_s: float) -> TrialResult:
    """Set the launcher's wall_s, the `exit` phase (wall time the trial's own phases do not
    account for) and overhead_s."""
    result.wall_s = wall_s
    phases = result.phases_s
    if phases:
        inside = sum(v for k, v in phases.items() if k != "exit")
        result.phases_s = {**phases, "exit": round(max(0.0, wall_s - inside), 4)}
        measured = phases.get("measure", 0.0)
        result.overhead_s = round(max(0.0, wall_s - measured - (result.compile_s or 0.0)), 4)
    return result
