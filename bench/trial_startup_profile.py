"""What an eager trial's set-up, build and first step are made of, stage by stage (issue 10,
item 6: an eager GPT-2 124M grid on the H200 spent 48-50% of its wall outside the measurement;
per trial a median 0.82 s "build" and 0.66 s "first_step", `bench/results/study_overhead_h200.md`).

Each run is a fresh interpreter, as a trial is (what the pre-imported worker imports, imported
before the clock starts), that times with a device synchronise after every stage:

    cuda_init      torch.cuda.init() and the first allocation (the CUDA context)
    probe          workers.support.probe_attention (runs the attention kernel once)
    build          the model built on the device (workers.models.build_model)
    optimizer      workers.training.build_optimizer
    data           workers.data.make_batches and the first batch
    first_step     the first optimizer step (cuBLAS / cuDNN handles, autotuning)
    second_step    the next one, for comparison

    python bench/trial_startup_profile.py --preset gpt2-124m --runs 3 --out prof.json   # a GPU
    python bench/trial_startup_profile.py --preset gpt2-124m --attention cudnn
    python bench/trial_startup_profile.py --runs 2                                      # CPU, tiny
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

STAGES = ["cuda_init", "probe", "build", "optimizer", "data", "first_step", "second_step"]


def child(preset: str, micro_batch: int, attention: str | None) -> dict[str, float]:
    from workers import preload

    preload._preload()  # what a forked trial has imported before it starts (workers/preload.py)
    import torch
    from startup_stages import StageClock, eager_config

    from workers import precision, support
    from workers.data import make_batches
    from workers.models import build_model
    from workers.training import TrainStep, build_optimizer

    gpu = torch.cuda.is_available()
    config = eager_config(preset, micro_batch, attention, study_id="bench-startup", gpu=gpu)
    device = torch.device("cuda" if gpu else "cpu")
    k, m, spec = config.knobs, config.measure, config.model
    clock = StageClock(sync=gpu)
    mark = clock.mark

    if gpu:
        torch.cuda.init()
        torch.empty(1, device=device)
    mark("cuda_init")
    refusal = support.probe_attention(config, device)
    assert refusal is None, refusal
    mark("probe")
    torch.manual_seed(m.seed)
    with device:
        model = build_model(spec, k)
    model.train()
    mark("build")
    optimizer = build_optimizer(model, k.optimizer)
    mark("optimizer")
    batches = make_batches(k, m, spec, device, m.seed, slow_input=False)
    step = TrainStep(
        model,
        optimizer,
        batches,
        grad_accum=k.grad_accum,
        autocast=lambda: precision.autocast(k.precision, device.type),
        scaler=precision.grad_scaler(k.precision, device.type),
        cudagraphs=False,
        fault="none",
        grad_sync=None,
    )
    mark("data")
    step()
    mark("first_step")
    step()
    mark("second_step")
    batches.close()
    return clock.times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny", help="model preset (default: tiny)")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--attention", help="attention backend (default: flash on a GPU)")
    parser.add_argument("--runs", type=int, default=3, help="fresh interpreters to time")
    parser.add_argument("--out", type=Path, help="write the runs and medians here as JSON")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.preset, args.micro_batch, args.attention)))
        return 0
    runs: list[dict[str, float]] = []
    for i in range(args.runs):
        cmd = [sys.executable, __file__, "--child", "--preset", args.preset]
        cmd += ["--micro-batch", str(args.micro_batch)]
        cmd += ["--attention", args.attention] if args.attention else []
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
        print(f"run {i + 1}/{args.runs}: " + ", ".join(f"{s} {runs[-1][s]:.3f}" for s in STAGES))
    medians = {s: round(statistics.median(r[s] for r in runs), 4) for s in STAGES}
    print("median s: " + ", ".join(f"{s} {medians[s]:.3f}" for s in STAGES))
    report: dict[str, Any] = {"preset": args.preset, "micro_batch": args.micro_batch}
    report["attention"] = args.attention or "flash (GPU) / math (CPU)"
    report |= {"runs": runs, "median_s": medians}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
