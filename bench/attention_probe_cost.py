"""What the attention probe (workers/support.py) costs in a fresh process, and why a cuDNN
trial's probe took 1.5-1.9 s on the H200 where flash's took 0.16-0.19 s
(bench/results/h200_session_20261204b).

Each case runs in its own interpreter (the cost is a first-use cost) and times, with a device
synchronise around each: the CUDA context, the probe at its own small shape (batch 1, seq <= 128),
the probe again, then one forward+backward at the trial's own shape (micro-batch x seq_len), twice.
Cases: flash and cuDNN as they are, and cuDNN after more and more of what a trial does before
its probe (CASES).

    python bench/attention_probe_cost.py --preset gpt2-124m --micro-batch 8 --out probe.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# What a trial does before its probe, added one step per case (workers/trial.py run_trial):
# 1 its imports (torch._dynamo, the models, compile's error types), 2 the machine's
# fingerprint, 3 its torch-level state (memory cap, matmul precision), 4 the static support
# checks. The last case is the trial itself (run_trial, in process): its build parts say what
# its probe cost, so a gap between it and the preamble cases is in what the cases lack.
CASES = {
    "flash": {"attention": "flash", "preamble": 0},
    "cudnn": {"attention": "cudnn", "preamble": 0},
    "cudnn-imports": {"attention": "cudnn", "preamble": 1},
    "cudnn-fingerprint": {"attention": "cudnn", "preamble": 2},
    "cudnn-trial-state": {"attention": "cudnn", "preamble": 3},
    "cudnn-static-check": {"attention": "cudnn", "preamble": 4},
    "cudnn-trial": {"attention": "cudnn", "preamble": 5},
}
# The trial as a study launches it (workers/launch.py: its environment, a temporary working
# directory, its own session), in a fresh interpreter or forked from the pre-imported worker
# (workers/preload.py; the first launch starts the server and runs fresh, so the second counts).
LAUNCHED = {"cudnn-launched-fresh": "0", "cudnn-launched-forked": "1"}
TRIAL_PREAMBLE = 5


def _config(preset: str, micro_batch: int, attention: str):
    from startup_stages import eager_config

    return eager_config(preset, micro_batch, attention, study_id="bench-probe")


def launched(
    preset: str, micro_batch: int, preload: str, attention: str = "cudnn"
) -> dict[str, float]:
    """A trial launched as a study launches it; its phases and build parts."""
    import os

    from workers import preload as preload_mod
    from workers.launch import run_trial_process

    os.environ[preload_mod.ENABLE_ENV] = preload
    config = _config(preset, micro_batch, attention)
    for _ in range(2 if preload == "1" else 1):
        result = run_trial_process(config)
    return _trial_times(result)


def child(preset: str, micro_batch: int, attention: str, preamble: int) -> dict[str, float]:
    import torch

    if preamble >= 1:
        import torch._dynamo

        import workers.models.llama  # noqa: F401
        from workers.failures import compile_error_types

        compile_error_types()

    from startup_stages import StageClock

    from workers import memory, precision, support
    from workers.models.attention import attend

    config = _config(preset, micro_batch, attention)
    device = torch.device("cuda")
    if preamble >= TRIAL_PREAMBLE:
        return _whole_trial(config)
    clock = StageClock(sync=True)
    mark = clock.mark

    torch.cuda.init()
    torch.empty(1, device=device)
    if preamble >= 2:
        from workers import fingerprint

        fingerprint.collect(device)
    if preamble >= 3:
        precision.set_matmul_precision(config.knobs.precision, "cuda")
        memory.apply_cap(device, config.measure.memory_limit_gib)
    if preamble >= 4:
        assert support.static_check(config, device) is None
    mark("cuda_init")
    for stage in ("probe", "probe_again"):
        assert support.probe_attention(config, device) is None
        mark(stage)
    spec = config.model
    shape = (micro_batch, spec.n_head, spec.seq_len, spec.head_dim)
    q = torch.randn(shape, device=device, dtype=torch.bfloat16, requires_grad=True)
    mark("inputs")
    for stage in ("trial_shape", "trial_shape_again"):
        attend(q, q, q, config.knobs.attention).sum().backward()
        mark(stage)
    return clock.times


def _whole_trial(config) -> dict[str, float]:
    """The trial's own clock: its phases and build parts (the probe among them)."""
    from workers.trial import run_trial

    return _trial_times(run_trial(config))


def _trial_times(result) -> dict[str, float]:
    """A successful trial's phases and build parts, the probe among them."""
    assert result is not None and result.status == "ok", result and result.error_message
    return {
        **{f"phase_{k}": round(v, 4) for k, v in (result.phases_s or {}).items()},
        **{f"build_{k}": round(v, 4) for k, v in (result.build_parts_s or {}).items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="gpt2-124m")
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3, help="fresh processes per case")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cases", nargs="+", choices=[*CASES, *LAUNCHED], help="default: all")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child in LAUNCHED:
        print(json.dumps(launched(args.preset, args.micro_batch, LAUNCHED[args.child])))
        return 0
    if args.child:
        case = CASES[args.child]
        print(json.dumps(child(args.preset, args.micro_batch, **case)))
        return 0
    runs: dict[str, list[dict[str, float]]] = {}
    for _ in range(args.runs):
        # Interleaved, so a drift of the machine hits every case alike.
        for name in args.cases or [*CASES, *LAUNCHED]:
            out = (
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        name,
                        "--preset",
                        args.preset,
                        "--micro-batch",
                        str(args.micro_batch),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                .stdout.strip()
                .splitlines()[-1]
            )
            runs.setdefault(name, []).append(json.loads(out))
    medians = {
        name: {k: round(statistics.median(r[k] for r in rs), 4) for k in rs[0]}
        for name, rs in runs.items()
    }
    stages = list(dict.fromkeys(s for m in medians.values() for s in m))
    print(f"{'stage (median s)':20s}" + "".join(f"{n:>22s}" for n in medians))
    for s in stages:
        cells = (f"{medians[n][s]:22.4f}" if s in medians[n] else f"{'':22s}" for n in medians)
        print(f"{s:20s}" + "".join(cells))
    if args.out:
        args.out.write_text(json.dumps({"medians": medians, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
