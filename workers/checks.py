"""The checks a trial runs besides its timed repeats: the headroom check (an evaluation pass and
a checkpoint save after the repeats, workers/headroom.py) and the numerics check's parity
steps (a parity trial of their own, or a prelude to a headroom check), with the loss curve they
record. Called by workers/trial.py in its order (docs/measurement.md).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from autotuner.spec import CompileMode, TrialConfig, TrialResult, TrialStatus
from workers import compile_budget, phases


def public_fields(info: dict[str, Any]) -> dict[str, Any]:
    """The result fields gathered so far (keys starting with _ are the trial's own state)."""
    return {key: value for key, value in info.items() if not key.startswith("_")}


def headroom_check(step, device, info: dict[str, Any], group) -> None:
    """After the timed repeats: an evaluation pass and a checkpoint save (workers/headroom.py),
    and the peaks over the whole trial with them. An OOM here is the trial's result (the
    config does not survive a real run's evaluation or checkpoint); with several ranks, all
    agree on a failure first, so no rank waits in a collective for one that died."""
    from workers import headroom, memory

    failure = None
    clock: phases.Clock = info["_clock"]
    clock.mark("checks")  # what came before (the peaks of the timed steps) is the checks'
    try:
        size = headroom.eval_and_checkpoint(step, mark=clock.mark)
    except Exception as exc:
        if group is None:
            raise
        failure = exc
    if group is not None:
        group.agree(failure)
    peak_mem, peak_reserved, _ = memory.peaks(device)
    if group is not None:
        peak_mem, peak_reserved = group.largest([peak_mem, peak_reserved])
    info["peak_mem_with_eval_ckpt_gib"] = peak_mem
    info["peak_reserved_with_eval_ckpt_gib"] = peak_reserved
    info["notes"].append(
        f"headroom check: one evaluation pass and a checkpoint save ({size / 2**20:,.1f} MiB, "
        "serialized, not written to disk) after the timed repeats; peak_*_with_eval_ckpt_gib "
        "include them"
    )


def parity_loop(config: TrialConfig, step, ranks, done=lambda: None):
    """`parity_steps` optimizer steps, every step's loss read back on the host (a sync: these
    steps measure numerics, not time); returns (loss curve, each step's wall). `done` is
    called after the first step (the compile budget's watch)."""
    from workers import measure

    curve: list[float] = []
    step_s: list[float] = []
    for i in range(config.measure.parity_steps or 0):
        t_step = time.perf_counter()
        curve.append(measure.check_finite(ranks.mean(step()), f"parity step {i + 1}"))
        step_s.append(time.perf_counter() - t_step)
        if i == 0:
            done()
    return curve, step_s


def parity_compile_s(config: TrialConfig, step_s: list[float]) -> float | None:
    """As in a measured trial: the first step's excess over a steady step is the compile."""
    if config.knobs.compile_mode == CompileMode.NONE or len(step_s) < 2:
        return None
    return max(0.0, step_s[0] - statistics.median(step_s[1:]))


def run_parity(
    config: TrialConfig, step, ranks, rank: int, info: dict[str, Any], started: float
) -> TrialResult | None:
    """A loss-parity trial: `parity_steps` optimizer steps on the parity stream, every step's
    loss recorded (read on the host each step: this trial measures numerics, not time).
    `started`: when the trial's process started (perf_counter), for its wall_s."""
    from workers import compile_cache

    m = config.measure
    t0 = time.perf_counter()
    curve, step_s = parity_loop(config, step, ranks)
    elapsed = time.perf_counter() - t0
    clock: phases.Clock = info["_clock"]
    clock.mark("measure")
    if step_s:
        clock.split("measure", "first_step", step_s[0])
    compile_s = parity_compile_s(config, step_s)
    if compile_s is not None:
        # Whether it hit the study's cache says if a re-run's compile was warm.
        info["compile_s"] = compile_s
        info["compile_cache_hits"], info["compile_cache_misses"] = compile_cache.delta(
            info["_cache_before"]
        )
    info["notes"].append(
        f"parity trial: {m.parity_steps} steps from seed {m.seed} on the learnable parity "
        "stream; tokens/s counts every step, the first (compiling) one too: not a measurement"
    )
    if rank != 0:
        return None  # rank 0 reports for every rank (the losses are the ranks' mean)
    tokens = info["tokens_per_step"] * len(curve)
    return TrialResult(
        status=TrialStatus.OK,
        tokens_per_s=tokens / max(elapsed, 1e-9),
        loss_curve=curve,
        loss_first=curve[0],
        loss_last=curve[-1],
        wall_s=time.perf_counter() - started,
        **public_fields(info),
    )


def parity_prelude(
    config: TrialConfig, step, ranks, rank: int, device, info: dict[str, Any]
) -> tuple[list[float], float]:
    """A headroom check's parity steps before its warm-up (the numerics check's candidate
    run, search/numerics.py): one micro-batch a step on this rank's parity stream, under the
    compile budget like a warm-up. Returns (loss curve, the compile they did); phase `parity`."""
    from workers.data import ParityBatches

    k, m, spec = config.knobs, config.measure, config.model
    stream = ParityBatches(spec.vocab_size, k.micro_batch_size, spec.seq_len, device, m.seed + rank)
    compiles = k.compile_mode != CompileMode.NONE
    with (
        compile_budget.watch(config, compiles=compiles) as compiled,
        step.one_micro_batch_per_step(stream),
    ):
        curve, step_s = parity_loop(config, step, ranks, done=compiled)
    info["_clock"].mark("parity")
    info["notes"].append(
        f"numerics: {m.parity_steps} parity steps of one micro-batch from seed {m.seed} on the "
        "learnable parity stream before the warm-up (loss_curve), then the trial as measured"
    )
    return curve, parity_compile_s(config, step_s) or 0.0
