"""The timing protocol of docs/measurement.md, over any `step()` and `sync()`.

1. First step, timed alone: it holds torch.compile's tracing and codegen, cuDNN/cuBLAS
   heuristics, allocator growth. Reported as first_step_s, never counted in throughput.
2. Warm-up: single steps, each synced and timed, until the last few agree within
   `warmup_stable_rel` (CUDA-graph recording and autotuning happen on steps 2-3) and at least
   `warmup_min_steps` ran.
3. Repeats: R repeats of S steps. The device is synced only at each repeat's edges, so
   the host can run ahead and queue kernels as it does in real training; syncing every step
   would add a bubble per step and understate throughput.

Early stop: with `abandon_below_tokens_per_s` set (search trials only: the coordinator's floor,
far below anything that could win), the repeats stop after the first one that runs below it;
`Timing.stopped_early` says so and the trial reports the repeats it ran, never as a full
measurement. The decision uses the slowest rank's time, so every rank takes it together.

Losses are kept as device tensors and read at the repeat edges (already synced): reading
them inside a repeat would add syncs.

With several ranks (workers/distributed.py) every time goes through `ranks.slowest` and every
loss through `ranks.mean`, so all ranks take the same decisions from the same numbers, and the
`sync` given also waits for every rank (a barrier at the repeat edges).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from autotuner.spec import MeasureSettings
from workers.errors import NumericsError

STABLE_WINDOW = 3


class OneProcess:
    """The protocol's view of the other ranks when there are none."""

    def slowest(self, seconds: float) -> float:
        return seconds

    def mean(self, loss: torch.Tensor) -> float:
        return float(loss)


ONE_PROCESS = OneProcess()


@dataclass
class Timing:
    first_step_s: float
    warmup_step_s: list[float]
    warmup_stable: bool
    step_time_s: float  # the steady step time that chose S
    steps_per_repeat: int = 0
    repeat_s: list[float] = field(default_factory=list)
    loss_initial: float = math.nan  # the first step's loss
    loss_first: float = math.nan  # the first measured step's loss
    loss_last: float = math.nan  # the last measured step's loss
    stopped_early: bool = False  # the repeats stopped below abandon_below_tokens_per_s


def check_finite(loss: float, where: str) -> float:
    if not math.isfinite(loss):
        raise NumericsError(f"loss is {loss} at {where}: the config produces non-finite values")
    return loss


def warm_up(
    step: Callable[[], torch.Tensor],
    sync: Callable[[], None],
    s: MeasureSettings,
    ranks: OneProcess = ONE_PROCESS,
    after_first: Callable[[], None] | None = None,
) -> Timing:
    """The first step (where torch.compile compiles; `after_first` is called once it is done),
    then steps until their times settle."""
    sync()
    t0 = time.perf_counter()
    loss = step()
    sync()
    if after_first is not None:
        after_first()
    first = ranks.slowest(time.perf_counter() - t0)
    loss_initial = check_finite(ranks.mean(loss), "the first step")
    times: list[float] = []
    stable = False
    window = min(STABLE_WINDOW, s.warmup_max_steps)
    while len(times) < s.warmup_max_steps:
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append(ranks.slowest(time.perf_counter() - t0))
        check_finite(ranks.mean(loss), f"warm-up step {len(times)}")  # synced already: free
        if len(times) >= max(s.warmup_min_steps, window):
            last = times[-window:]
            if (max(last) - min(last)) / statistics.median(last) <= s.warmup_stable_rel:
                stable = True
                break
    step_time = statistics.median(times[-window:])
    return Timing(first, times, stable, step_time, loss_initial=loss_initial)


def steps_per_repeat(step_time_s: float, s: MeasureSettings) -> int:
    """S: enough steps that one repeat lasts at least min_repeat_s."""
    if s.steps_per_repeat is not None:
        return s.steps_per_repeat
    return max(1, min(100_000, math.ceil(s.min_repeat_s / max(step_time_s, 1e-9))))


def timed_repeats(
    step: Callable[[], torch.Tensor],
    sync: Callable[[], None],
    timing: Timing,
    s: MeasureSettings,
    ranks: OneProcess = ONE_PROCESS,
    *,
    tokens_per_step: int | None = None,
) -> Timing:
    """R repeats of S steps; with `tokens_per_step` and s.abandon_below_tokens_per_s, stop
    after a repeat below that rate (all tokens counted: padding only lowers the real rate, so
    a trial is never stopped for a rate it did not run below)."""
    S = timing.steps_per_repeat = steps_per_repeat(timing.step_time_s, s)
    floor = s.abandon_below_tokens_per_s if tokens_per_step else None
    first_loss = None
    for r in range(s.repeats):
        sync()  # repeat edge: everything queued before is finished
        t0 = time.perf_counter()
        for _ in range(S):
            loss = step()
            if first_loss is None:
                first_loss = loss
        sync()  # repeat edge: everything this repeat queued is finished
        timing.repeat_s.append(ranks.slowest(time.perf_counter() - t0))
        last = check_finite(ranks.mean(loss), f"the end of repeat {r + 1}")
        if floor is not None and tokens_per_step * S / timing.repeat_s[-1] < floor:
            timing.stopped_early = r + 1 < s.repeats  # the last repeat: nothing was skipped
            break
    timing.loss_first = check_finite(ranks.mean(first_loss), "the first measured step")
    timing.loss_last = last
    return timing
