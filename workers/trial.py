"""Run one trial, top to bottom, in this process; and the CLI the launcher starts.

    python -m workers.trial --config cfg.json --result out.json     ("-": stdin / stdout)

The order follows docs/measurement.md: process-level state first (environment, NCCL variables,
before torch is imported), then torch-level state (threads, matmul precision, memory cap), then
the support checks, then model -> float8 -> optimizer -> compile -> data, then the timing
protocol (workers/measure.py). Every outcome is a TrialResult; a config failure (oom,
unsupported, compile_error, numerics) is a result like any other and the process exits 0.

The end checks' own steps (the headroom check, the parity steps) are in workers/checks.py.
"""

from __future__ import annotations

import time

# Before any other import: the `imports` phase starts here (workers/phases.py).
_PROCESS_START = time.perf_counter()
_STARTED_AT = time.time()

import argparse  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

from autotuner.spec import (  # noqa: E402
    ALLOC_CONF_VAR,
    ALLOCATOR_SETTINGS,
    CompileMode,
    CompileScope,
    DataSource,
    Device,
    FailureClass,
    TrialConfig,
    TrialResult,
    TrialStatus,
    process_env,
)
from workers import compile_budget, phases  # noqa: E402
from workers.checks import headroom_check, parity_prelude, public_fields, run_parity  # noqa: E402
from workers.device import inactive_knobs, no_cuda_reason  # noqa: E402
from workers.process import PEER_FAILED_EXIT, die_with_parent, no_core_files  # noqa: E402
from workers.trial_io import read_config, write_result  # noqa: E402

# "1": exit through Python's full interpreter teardown (the baseline of bench/trial_overhead.py);
# anything else: os._exit once the result is written.
FULL_TEARDOWN_ENV = "AUTOTUNER_TRIAL_FULL_TEARDOWN"


def restart_clock() -> None:
    """A trial forked by the pre-imported worker (workers/preload.py) starts its clock at the
    fork, not when the server imported this module."""
    global _PROCESS_START, _STARTED_AT
    _PROCESS_START, _STARTED_AT = time.perf_counter(), time.time()


def apply_process_env(config: TrialConfig) -> None:
    """Set process_env(config) in this process (call before importing torch)."""
    os.environ.update(process_env(config))


def resolve_device(config: TrialConfig, local_rank: int = 0):
    import torch

    want = config.measure.device
    if want == Device.CPU or (want == Device.AUTO and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        from workers.errors import EnvironmentProblem

        raise EnvironmentProblem(f"the study asked for a GPU but {no_cuda_reason()}")
    if local_rank >= torch.cuda.device_count():
        raise _InfraError(
            f"local rank {local_rank} has no GPU: this worker sees {torch.cuda.device_count()}"
        )
    return torch.device("cuda", local_rank)


class _InfraError(Exception):
    pass


def _allocator_in_effect(allocator: str) -> str:
    """The note that the CUDA caching allocator runs the mode the knob asked for; raises where it
    does not. torch parses PYTORCH_CUDA_ALLOC_CONF once, at the allocator's first use: a trial
    forked from a server whose torch had already parsed it (workers/preload.py) would measure
    the default allocator under the knob's name."""
    import torch

    want = ALLOCATOR_SETTINGS[allocator]
    read = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
    if read is None:
        return f"CUDA allocator: {ALLOC_CONF_VAR}={os.environ.get(ALLOC_CONF_VAR, '')}"
    settings = str(read())
    if want not in settings.replace(" ", ""):
        raise _InfraError(
            f"allocator={allocator} asks the CUDA caching allocator for {want}, but it runs "
            f"{settings or 'its defaults'!r} ({ALLOC_CONF_VAR} was read before the trial set it)"
        )
    return f"CUDA allocator: {settings} ({ALLOC_CONF_VAR}, knob allocator={allocator})"


def run_trial(config: TrialConfig) -> TrialResult | None:
    """Run one trial, or one rank of it, in this process (never raises for a failed config).

    In a rank of a multi-GPU trial (the launcher set WORLD_SIZE), a rank other than 0 returns
    None when all went well (rank 0 reports for all), and PeerFailed propagates when another
    rank failed first and reports the failure.
    """
    # Everything the trial and its failure path import is imported now, before a memory cap
    # applies: an import that fails under the cap must not turn an OOM into a crash.
    import torch._dynamo  # noqa: F401  (the optimizer and torch.compile import it lazily)

    import workers.models.factory
    import workers.models.gpt
    import workers.models.llama  # noqa: F401
    from workers import fingerprint as fp_mod
    from workers import memory
    from workers.errors import PeerFailed
    from workers.failures import classify, compile_error_types, lost_peer

    compile_error_types()
    apply_process_env(config)  # again, for in-process callers (tests); main() did it first
    info: dict[str, Any] = {"notes": [], "phases_s": phases.start_phase(_STARTED_AT)}
    clock = info["_clock"] = phases.Clock(info["phases_s"], _PROCESS_START)
    clock.mark("imports")
    try:
        device = resolve_device(config, int(os.environ.get("LOCAL_RANK", "0")))
        info["fingerprint"] = fp_mod.collect(device)
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            from workers.distributed import Group  # torch.distributed: only where it is used

            info["_group"] = Group.start(config, device)
        return _run(config, device, info)
    except _InfraError as exc:
        return TrialResult.failure(FailureClass.INFRA, str(exc), **public_fields(info))
    except PeerFailed:
        raise
    except Exception as exc:
        memory.release_cap()
        failure_class, message, extra = classify(exc)
        if failure_class == FailureClass.COMPILE_ERROR:
            from workers.compiling import fused_loss_untraceable

            refusal = fused_loss_untraceable(exc, config.knobs)
            if refusal is not None:
                failure_class, message = FailureClass.UNSUPPORTED, str(refusal)
                extra = {**extra, "unsupported_knobs": refusal.knobs}
        group = info.get("_group")
        if failure_class == FailureClass.CRASH and group is not None and group.stalled():
            failure_class = FailureClass.TIMEOUT
            message = (
                f"rank {group.rank} waited {group.timeout_s:.0f} s (the process-group timeout) "
                f"in a collective: another rank is hung or far slower\n{message}"
            )
        elif failure_class == FailureClass.CRASH and group is not None and lost_peer(exc):
            # A knock-on: reported as this rank's crash, it would race the dead peer's report
            # on another node, and the first to arrive would name this rank.
            raise PeerFailed(f"rank {group.rank} lost a peer in a collective: {message}") from exc
        return TrialResult.failure(failure_class, message, **public_fields(info), **extra)
    finally:
        batches = info.pop("_batches", None)
        if batches is not None:
            batches.close()  # stop loader workers, remove the token file


def build_step(config: TrialConfig, device, info: dict[str, Any], group=None):
    """Check support, then build model -> float8 -> [parallel wrapper] -> optimizer -> compile
    -> data -> TrainStep.

    Fills info (param_count, notes, _batches). Raises UnsupportedConfig before building
    anything when this worker has no kernel for the config. With a process group (one rank of a
    multi-GPU trial) the ranks agree after the checks and after the build, so one rank's
    refusal or OOM stops them all instead of leaving the others in a collective.
    """
    import torch

    from workers import faults, precision, support
    from workers.compiling import compile_model, regions_note
    from workers.data import make_batches
    from workers.models import build_model
    from workers.models.factory import FactoryLM
    from workers.training import TrainStep, build_optimizer

    k, m, spec = config.knobs, config.measure, config.model
    rank = 0 if group is None else group.rank
    strikes = faults.strikes(config.fault_rank, rank)
    parts = info["build_parts_s"] = {}
    part = phases.Clock(parts, time.perf_counter(), sync=_synchronizer(device))
    if group is not None:
        from workers import distributed  # only multi-GPU trials pay for its import
    refusal = (
        support.static_check(config, device, ranks=1 if group is None else group.world_size)
        or (group and distributed.check(config, device))
        or (strikes and faults.unsupported(config.fault))
        or None
    )
    part.mark("checks")
    if refusal is None and config.measure.attention_probe:
        refusal = support.probe_attention(config, device)
        part.mark("probe")
    if group is not None:
        group.agree(refusal)
    elif refusal is not None:
        raise refusal

    # The same seed on every rank: every replica (DDP) and the full model FSDP2 shards start
    # from the same weights.
    torch.manual_seed(m.seed)
    failure = None
    try:
        # Parameters are created and initialised on the device itself: initialising a 1B model
        # on the CPU and copying it over would cost seconds per trial and measure nothing.
        with device:
            model = build_model(spec, k)
        model.train()
        info["param_count"] = sum(p.numel() for p in model.parameters())
        if isinstance(model, FactoryLM):  # the user's shapes: N for the FLOPs counted, not guessed
            info["_flops_params"] = model.flops_params()
        # A Hugging Face model's sliding windows, as its attention calls asked for them.
        info["_attention_spans"] = getattr(model, "attention_spans", None)
        if k.precision.is_fp8:
            n = precision.convert_fp8(model, k.precision)
            info["notes"].append(f"{k.precision.value}: {n} Linear layers run in float8 (torchao)")
    except Exception as exc:
        if group is None:
            raise
        failure = exc
    part.mark("model")
    if group is not None:
        group.agree(failure)

    def compiled_regions(regions: str) -> None:
        # Per block: what the trainer must compile the same way.
        info["compiled_regions"] = regions
        info["notes"].append(regions_note(regions, k.compile_mode))

    def compiled(module: torch.nn.Module, scope: CompileScope = k.compile_scope) -> Any:
        runnable, regions = compile_model(module, k.compile_mode, scope)
        if regions is not None:
            compiled_regions(regions)
        return runnable

    grad_sync = None
    if group is None:
        # The optimizer holds the original parameters; the compiled wrapper shares them.
        optimizer = build_optimizer(model, k.optimizer)
        runnable = compiled(model)
    else:
        runnable, grad_sync = distributed.parallelize(
            model, config, group, compiled, compiled_regions
        )
        # After the wrapper: FSDP2 replaced the parameters by this rank's shards.
        optimizer = build_optimizer(model, k.optimizer)
    part.mark("optimizer")
    # Each data-parallel rank reads its own batches, as in real training.
    batches = make_batches(
        k, m, spec, device, m.seed + rank, slow_input=strikes and config.fault == "slow_input"
    )
    info["_batches"] = batches
    part.mark("data")
    return TrainStep(
        runnable,
        optimizer,
        batches,
        grad_accum=k.grad_accum,
        autocast=lambda: precision.autocast(k.precision, device.type),
        scaler=precision.grad_scaler(k.precision, device.type),
        cudagraphs=k.compile_mode in (CompileMode.REDUCE_OVERHEAD, CompileMode.MAX_AUTOTUNE),
        fault=config.fault if strikes else "none",
        grad_sync=grad_sync,
    )


def _synchronizer(device):
    """A device synchronise for the build's part clock (None on the CPU: nothing is queued)."""
    if device.type != "cuda":
        return None
    import torch

    return lambda: torch.cuda.synchronize(device)


def _run(config: TrialConfig, device, info: dict[str, Any]) -> TrialResult | None:
    import torch

    from autotuner import flops
    from workers import compile_cache, faults, measure, memory, precision, telemetry
    from workers.data import InputCounters
    from workers.errors import NumericsError

    k, m, spec = config.knobs, config.measure, config.model
    notes: list[str] = info["notes"]
    group = info.get("_group")
    rank, dp_ranks = (0, 1) if group is None else (group.rank, group.world_size)
    tokens_per_step = k.micro_batch_size * spec.seq_len * k.grad_accum * dp_ranks
    info["tokens_per_step"] = tokens_per_step

    # --- torch-level process state, before anything is built
    if m.cpu_threads:
        torch.set_num_threads(m.cpu_threads)
    precision.set_matmul_precision(k.precision, device.type)
    info["memory_limit_gib"] = memory.apply_cap(device, m.memory_limit_gib, notes)
    if m.data is not None:
        notes.append(f"data: {m.data.path} (read on {os.uname().nodename})")
    off = inactive_knobs(config, device.type)
    if off:
        notes.append("inactive knobs (no effect in this config): " + ", ".join(off))
    if device.type == "cuda" and k.allocator != "default":
        notes.append(_allocator_in_effect(k.allocator))

    # What a killed trial's compile left half-built in the cache would fail this one's.
    if k.compile_mode != CompileMode.NONE:
        for library in compile_cache.drop_unfinished_builds(compile_cache.inductor_dir()):
            notes.append(f"compile cache: removed {library.name}, half-built by a killed trial")

    # --- support checks, then build
    clock: phases.Clock = info["_clock"]
    clock.mark("setup")
    t_build = time.perf_counter()
    cache_before = info["_cache_before"] = compile_cache.counters()
    step = build_step(config, device, info, group)
    info["build_s"] = time.perf_counter() - t_build
    clock.mark("build")
    if faults.strikes(config.fault_rank, rank):
        faults.before_training(config.fault)

    ranks = measure.ONE_PROCESS if group is None else group
    if m.parity_steps is not None and not m.headroom_check:
        return run_parity(config, step, ranks, rank, info, _PROCESS_START)
    parity_curve, parity_compile_s = None, 0.0
    if m.parity_steps is not None:
        # A headroom check that is also the numerics check's candidate run: its parity steps
        # first, from the seed's weights, one micro-batch each on the parity stream (as the
        # reference ran), then the trial as measured, with its accumulation and its batches,
        # and the headroom check. One process and one compile for both checks.
        parity_curve, parity_compile_s = parity_prelude(config, step, ranks, rank, device, info)

    # --- measure (with several ranks: barriers at the edges, the slowest rank's times)
    if group is not None:
        sync = group.edge
    elif device.type == "cuda":
        sync = lambda: torch.cuda.synchronize(device)  # noqa: E731
    else:
        sync = lambda: None  # noqa: E731
    t_warm = time.perf_counter()
    with compile_budget.watch(config, compiles=k.compile_mode != CompileMode.NONE) as compiled:
        timing = measure.warm_up(step, sync, m, ranks, after_first=compiled)
    info.update(
        first_step_s=timing.first_step_s,
        warmup_steps=len(timing.warmup_step_s),
        warmup_s=time.perf_counter() - t_warm,
    )
    clock.mark("warmup")
    clock.split("warmup", "first_step", timing.first_step_s)
    if k.compile_mode != CompileMode.NONE:
        # Compilation happens inside the first step (forward and backward graphs); a steady
        # step's own work is subtracted so compile_s is the compile overhead alone.
        # A parity prelude compiled the graphs already (its first step): its compile counts.
        info["compile_s"] = max(0.0, timing.first_step_s - timing.step_time_s) + parity_compile_s
        # Every compile of the trial is done by now (recompiles happen in warm-up too).
        info["compile_cache_hits"], info["compile_cache_misses"] = compile_cache.delta(cache_before)
        from workers.compiling import graph_breaks

        if (breaks := graph_breaks()) is not None:
            notes.append(breaks)
    if not timing.warmup_stable:
        last = timing.warmup_step_s[-3:]
        notes.append(
            f"warm-up did not settle within {m.warmup_max_steps} steps "
            f"(last step times {', '.join(f'{t * 1e3:.1f} ms' for t in last)})"
        )
    # The peak is the whole trial's, warm-up and compile included: the config needs all of it
    # to run at all. (Resetting it after warm-up hid the CUDA-graph pool that reduce-overhead
    # allocates while recording: 1.4 GiB reported where 8.6 GiB was reserved, H200 run 1.)
    hz = m.telemetry_hz if device.type == "cuda" and rank == 0 else 0
    input_pipeline = InputCounters(step.batches)  # the loader's counters over the repeats
    with telemetry.Sampler(hz, device.index or 0) as sampler:
        measure.timed_repeats(step, sync, timing, m, ranks, tokens_per_step=tokens_per_step)
    input_pipeline.stop()
    clock.mark("measure")
    peak_mem, peak_reserved, memory_kind = memory.peaks(device)
    if group is not None:  # memory is per GPU: the largest rank's
        peak_mem, peak_reserved = group.largest([peak_mem, peak_reserved])
    # Every rank takes part (a collective): the most-starved rank's share.
    input_wait = input_pipeline.wait_share(sum(timing.repeat_s), ranks)
    if m.headroom_check:
        headroom_check(step, device, info, group)

    # --- sanity: the loss must fall (same fixed batches every step for synthetic data)
    reference = timing.loss_first
    if m.data_source != DataSource.SYNTHETIC:
        reference = timing.loss_initial  # fresh windows each step: compare with the start
        notes.append("loss compared with the first step's (loader data differs step to step)")
    elif timing.stopped_early and timing.steps_per_repeat == 1:
        reference = timing.loss_initial  # one measured step: compare with the first step's
    if timing.stopped_early:
        floor = m.abandon_below_tokens_per_s or 0.0
        notes.append(
            f"stopped early: repeat 1 of {m.repeats} ran "
            f"{tokens_per_step * timing.steps_per_repeat / timing.repeat_s[0]:,.0f} tokens/s, "
            f"below the study's floor of {floor:,.0f} (measure.abandon_below_tokens_per_s): "
            "not a full measurement, never a recommendation"
        )
    if not timing.loss_last < reference:
        raise NumericsError(
            f"loss did not decrease ({reference:.4f} -> {timing.loss_last:.4f} over "
            f"{timing.steps_per_repeat * m.repeats} measured steps): the config does not train"
        )

    if rank != 0:
        return None  # rank 0 reports for every rank (the numbers above are agreed on)

    # --- throughput of real tokens, MFU
    S = timing.steps_per_repeat
    padding = input_pipeline.padding_share()
    real_tokens_per_step = tokens_per_step * (1.0 - (padding or 0.0))
    if padding:
        notes.append(
            f"{padding:.1%} of token positions were padding (dataset rows shorter than "
            "seq_len+1): tokens/s counts real tokens only"
        )
    per_repeat = sorted(real_tokens_per_step * S / t for t in timing.repeat_s)
    median = statistics.median(per_repeat)
    flops_per_token = flops.flops_per_token(
        spec, params=info.get("_flops_params"), attention_spans=info.get("_attention_spans")
    )
    if m.peak_flops is not None:
        peak, peak_source = m.peak_flops, "measure.peak_flops (user)"
    elif device.type == "cuda":
        peak = flops.peak_flops_for(info["fingerprint"].device_name)
        peak_source = "autotuner.flops table (dense bf16)" if peak else None
    else:
        peak, peak_source = None, None
    per_gpu = median / dp_ranks
    clock.mark("checks")
    return TrialResult(
        status=TrialStatus.OK,
        tokens_per_s=median,
        tokens_per_s_min=per_repeat[0],
        tokens_per_s_max=per_repeat[-1],
        tokens_per_s_per_gpu=per_gpu,
        repeat_tokens_per_s=[real_tokens_per_step * S / t for t in timing.repeat_s],
        steps_per_repeat=S,
        step_time_s=statistics.median(timing.repeat_s) / S,
        mfu=None if peak is None else flops.mfu(per_gpu, flops_per_token, peak),
        flops_per_token=flops_per_token,
        flops_convention=flops.FLOPS_CONVENTION,
        peak_flops=peak,
        peak_flops_source=peak_source,
        peak_mem_gib=peak_mem,
        peak_reserved_gib=peak_reserved,
        memory_kind=memory_kind,
        loss_first=timing.loss_first,
        loss_last=timing.loss_last,
        loss_curve=parity_curve,
        telemetry=sampler.result,
        input_wait_share=input_wait,
        gpu_idle_share=telemetry.idle_share(sampler.result),
        padding_share=padding,
        wall_s=time.perf_counter() - _PROCESS_START,
        num_ranks=None if group is None else dp_ranks,
        parallel=None if group is None else k.parallel,
        stopped_early=timing.stopped_early,
        **public_fields(info),
    )


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    """Console script `autotuner-trial`: read a TrialConfig, run it, write a TrialResult."""
    parser = argparse.ArgumentParser(prog="autotuner-trial", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="TrialConfig JSON file, or - for stdin")
    parser.add_argument("--result", required=True, help="TrialResult JSON file, or - for stdout")
    args = parser.parse_args(argv)
    die_with_parent()
    no_core_files()
    try:
        config = read_config(args.config)
    except (OSError, ValueError) as exc:
        print(f"autotuner-trial: cannot read the config: {exc}", file=sys.stderr)
        return 2
    apply_process_env(config)  # before torch is imported anywhere
    from workers.errors import PeerFailed

    distributed = "WORLD_SIZE" in os.environ
    compile_budget.arm(lambda result: write_result(result, args.result))
    try:
        result = run_trial(config)
    except PeerFailed as exc:
        print(f"autotuner-trial: {exc}", file=sys.stderr, flush=True)
        os._exit(PEER_FAILED_EXIT)  # nothing to report: the failing rank does
    if result is not None:
        if result.wall_s is None:
            result.wall_s = time.perf_counter() - _PROCESS_START
        write_result(result, args.result)
    if distributed or os.environ.get(FULL_TEARDOWN_ENV) != "1":
        # Skip the interpreter's teardown: everything the trial reports is written, its
        # loader workers and token files are gone (run_trial's finally), and the launcher
        # kills what is left in its process group. The teardown (module and torch
        # destructors, inductor's worker pool) took 2.7-4 s per trial on a loaded CPU
        # (bench/trial_overhead.py). With several ranks it also skips the process group's
        # destructors: after a failure a peer may be gone and NCCL's teardown could wait.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
