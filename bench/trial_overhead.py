"""Where a trial's wall time goes outside the measurement, against a baseline in the same run.

Runs the cpu-demo space's configs (or `--preset` on a GPU) through the launcher the Ray task
uses (workers.launch.run_trial_process, a fresh process per trial), alternating two arms so
load on a shared machine hits both alike:

    baseline   the trial exits through Python's full interpreter teardown (as before the cut;
               AUTOTUNER_TRIAL_FULL_TEARDOWN=1)
    current    the trial as it runs now (os._exit once its result is written)

and prints, per arm, the median seconds of each phase (workers/phases.py), the median
overhead_s (wall - measured repeats - compile) and its share of the wall time, and the ratio
current / baseline.

    python bench/trial_overhead.py                       # CPU, the cpu-demo space, 5 per arm
    python bench/trial_overhead.py --preset gpt2-124m --compile default --trials 3   # a GPU
    python bench/trial_overhead.py --out bench/results/trial_overhead_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

from autotuner.search.space import load_space
from autotuner.spec import Device, Knobs, ModelSpec, TrialConfig, TrialResult, TrialStatus
from workers.launch import run_trial_process
from workers.trial import FULL_TEARDOWN_ENV

PHASES = [
    "start",
    "imports",
    "setup",
    "build",
    "first_step",
    "warmup",
    "measure",
    "checks",
    "exit",
]
ARMS = {"baseline": {FULL_TEARDOWN_ENV: "1"}, "current": {}}


def configs(args: argparse.Namespace) -> list[TrialConfig]:
    """One config per trial: the cpu-demo space's micro-batches (its other knobs at their
    defaults), or `--preset` with bf16 on a GPU."""
    space = load_space("cpu-demo")
    measure = space.measure
    if args.preset:
        model = ModelSpec.resolve({"preset": args.preset})
        base = {"precision": "bf16", "attention": "flash"}
    else:
        model = ModelSpec.resolve({"preset": "tiny"})
        base = {"precision": "fp32", "attention": "math"}
        measure = measure.model_copy(update={"device": Device.CPU})
    sizes = [1, 2, 4, 8, 16, 32]
    return [
        TrialConfig(
            study_id=f"bench-overhead-{os.getpid()}",  # one compile cache for the run
            trial_number=i,
            model=model,
            knobs=Knobs(**base, micro_batch_size=sizes[i % len(sizes)], compile_mode=args.compile),
            measure=measure,
        )
        for i in range(args.trials)
    ]


def run_arm(config: TrialConfig, env: dict[str, str]) -> TrialResult:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the launcher passes its environment to the trial
    try:
        return run_trial_process(config)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def summary(results: list[TrialResult]) -> dict[str, Any]:
    ok = [r for r in results if r.status == TrialStatus.OK and r.phases_s]
    if not ok:
        return {"trials": 0}
    phases = {
        p: round(statistics.median(r.phases_s.get(p, 0.0) for r in ok if r.phases_s), 3)
        for p in PHASES
    }
    overhead = statistics.median(r.overhead_s or 0.0 for r in ok)
    wall = statistics.median(r.wall_s or 0.0 for r in ok)
    return {
        "trials": len(ok),
        "wall_s": round(wall, 3),
        "overhead_s": round(overhead, 3),
        "overhead_share": round(statistics.median((r.overhead_s or 0) / r.wall_s for r in ok), 3)
        if all(r.wall_s for r in ok)
        else None,
        "compile_s": round(statistics.median(r.compile_s or 0.0 for r in ok), 3),
        "phases_s": phases,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5, help="trials per arm")
    parser.add_argument("--preset", help="a model preset to run on the GPU (default: tiny, CPU)")
    parser.add_argument("--compile", default="none", help="compile_mode of every trial")
    parser.add_argument("--out", type=Path, help="write the numbers here as JSON")
    args = parser.parse_args(argv)
    results: dict[str, list[TrialResult]] = {arm: [] for arm in ARMS}
    for i, config in enumerate(configs(args)):
        order = list(ARMS) if i % 2 == 0 else list(reversed(ARMS))  # A B, B A, ...
        for arm in order:
            r = run_arm(config, ARMS[arm])
            results[arm].append(r)
            detail = r.phases_s if r.status == TrialStatus.OK else r.error_message
            print(f"{arm:8s} #{i} wall {r.wall_s or 0:6.2f} s  {detail}", flush=True)
    report = {arm: summary(rs) for arm, rs in results.items()}
    base, cur = report["baseline"], report["current"]
    if base.get("trials") and cur.get("trials"):
        report["ratio_overhead"] = round(cur["overhead_s"] / base["overhead_s"], 3)
        report["ratio_wall"] = round(cur["wall_s"] / base["wall_s"], 3)
    report["command"] = " ".join(["python bench/trial_overhead.py", *(argv or sys.argv[1:])])
    report["host"] = {"node": platform.node(), "cpus": os.cpu_count(), "load": os.getloadavg()}
    print()
    print(f"{'phase (median s)':18s} {'baseline':>10s} {'current':>10s}")
    for p in PHASES:
        print(f"{p:18s} {base['phases_s'][p]:10.3f} {cur['phases_s'][p]:10.3f}")
    for key in ("wall_s", "compile_s", "overhead_s", "overhead_share"):
        print(f"{key:18s} {base[key]:10.3f} {cur[key]:10.3f}")
    print(f"overhead current/baseline: {report.get('ratio_overhead')}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
