"""Where a trial's wall time goes outside the measurement, against a baseline in the same run.

Runs the cpu-demo space's configs (or `--preset` on a GPU) through the launcher the Ray task
uses (workers.launch.run_trial_process), rotating three arms so load on a shared machine hits
them alike:

    baseline   as trials ran before the cuts: a fresh interpreter that exits through Python's
               full teardown (AUTOTUNER_PRELOAD=0, AUTOTUNER_TRIAL_FULL_TEARDOWN=1)
    fresh      a fresh interpreter, os._exit once the result is written (AUTOTUNER_PRELOAD=0)
    current    as trials run now: forked from the node's pre-imported worker (workers/preload.py;
               started and waited for before the timed trials: a one-off per node and code
               version, printed apart)

and prints, per arm, the median seconds of each phase (workers/phases.py), the median
overhead_s (wall - measured repeats - compile) and its share of the wall time, and the ratios
against the baseline.

    python bench/trial_overhead.py                       # CPU, the cpu-demo space, 5 per arm
    python bench/trial_overhead.py --preset gpt2-124m --compile default --trials 3   # a GPU
    python bench/trial_overhead.py --out bench/results/trial_overhead_cpu.json
    python bench/trial_overhead.py --gpus 2        # a 2-rank trial (gloo on the CPU, NCCL on GPUs)
    python bench/trial_overhead.py --preset gpt2-124m --attention cudnn   # the build's parts
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from autotuner.search.space import load_space
from autotuner.spec import Device, Knobs, ModelSpec, TrialConfig, TrialResult, TrialStatus
from workers import preload_client
from workers.launch import run_trial_process
from workers.launch_ranks import Rendezvous, rank_env
from workers.process import trial_env
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
BUILD_PARTS = ["checks", "probe", "model", "optimizer", "data"]  # TrialResult.build_parts_s
ARMS = {
    "baseline": {preload_client.ENABLE_ENV: "0", FULL_TEARDOWN_ENV: "1"},
    "fresh": {preload_client.ENABLE_ENV: "0"},
    "current": {},
}


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
    if args.attention:
        base["attention"] = args.attention
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


def with_ranks(configs: list[TrialConfig], gpus: int) -> list[TrialConfig]:
    """The same trials on `gpus` ranks (DDP; on the CPU one intra-op thread per rank)."""
    out = []
    for config in configs:
        config = config.model_copy(deep=True)
        config.num_gpus = gpus
        if config.measure.device == Device.CPU:
            config.measure = config.measure.model_copy(update={"cpu_threads": 1})
        out.append(config)
    return out


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


def start_server(config: TrialConfig) -> float:
    """Start this node's pre-imported worker if none runs; the seconds until it answers."""
    if config.num_gpus > 1:  # the ranks' environment keys a server of their own
        env = rank_env(config, Rendezvous(config.num_gpus), 0, 0, config.measure.timeout_s)
    else:
        env = trial_env(config)
    t0 = time.monotonic()
    path = preload_client.start_server(sys.executable, env)  # owned by this process
    while not path.exists():
        if time.monotonic() - t0 > 300:
            log = path.with_suffix(".log")
            raise SystemExit(f"the pre-imported worker did not start: see {log}")
        time.sleep(0.2)
    return time.monotonic() - t0


def summary(results: list[TrialResult]) -> dict[str, Any]:
    ok = [r for r in results if r.status == TrialStatus.OK and r.phases_s]
    if not ok:
        return {"trials": 0}
    phases = {
        p: round(statistics.median(r.phases_s.get(p, 0.0) for r in ok if r.phases_s), 3)
        for p in PHASES
    }
    # The build phase's parts (workers/trial.build_step): where a cuDNN trial's build goes.
    build_parts = {
        p: round(statistics.median((r.build_parts_s or {}).get(p, 0.0) for r in ok), 3)
        for p in BUILD_PARTS
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
        "build_parts_s": build_parts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5, help="trials per arm")
    parser.add_argument("--preset", help="a model preset to run on the GPU (default: tiny, CPU)")
    parser.add_argument("--compile", default="none", help="compile_mode of every trial")
    parser.add_argument("--attention", help="attention of every trial (default flash on a GPU)")
    parser.add_argument("--gpus", type=int, default=1, help="ranks per trial (default 1)")
    parser.add_argument("--out", type=Path, help="write the numbers here as JSON")
    args = parser.parse_args(argv)
    results: dict[str, list[TrialResult]] = {arm: [] for arm in ARMS}
    todo = configs(args) if args.gpus == 1 else with_ranks(configs(args), args.gpus)
    server_s = start_server(todo[0])
    print(f"pre-imported worker answering after {server_s:.1f} s", flush=True)
    for i, config in enumerate(todo):
        arms = list(ARMS)
        order = arms[i % len(arms) :] + arms[: i % len(arms)]  # A B C, B C A, ...
        for arm in order:
            r = run_arm(config, ARMS[arm])
            results[arm].append(r)
            detail = r.phases_s if r.status == TrialStatus.OK else r.error_message
            start = r.process_start
            print(f"{arm:8s} #{i} {start} wall {r.wall_s or 0:6.2f} s  {detail}", flush=True)
    report = {arm: summary(rs) for arm, rs in results.items()}
    report["server_start_s"] = round(server_s, 2)
    base = report["baseline"]
    for arm in ("fresh", "current"):
        if base.get("trials") and report[arm].get("trials"):
            report[f"ratio_overhead_{arm}"] = round(
                report[arm]["overhead_s"] / base["overhead_s"], 3
            )
            report[f"ratio_wall_{arm}"] = round(report[arm]["wall_s"] / base["wall_s"], 3)
    report["command"] = " ".join(["python bench/trial_overhead.py", *(argv or sys.argv[1:])])
    report["host"] = {"node": platform.node(), "cpus": os.cpu_count(), "load": os.getloadavg()}
    print()
    print(f"{'phase (median s)':18s}" + "".join(f"{arm:>10s}" for arm in ARMS))
    for p in PHASES:
        print(f"{p:18s}" + "".join(f"{report[arm]['phases_s'][p]:10.3f}" for arm in ARMS))
    for p in BUILD_PARTS:
        print(
            f"  build: {p:9s}" + "".join(f"{report[arm]['build_parts_s'][p]:10.3f}" for arm in ARMS)
        )
    for key in ("wall_s", "compile_s", "overhead_s", "overhead_share"):
        print(f"{key:18s}" + "".join(f"{report[arm][key]:10.3f}" for arm in ARMS))
    for arm in ("fresh", "current"):
        print(f"overhead {arm}/baseline: {report.get(f'ratio_overhead_{arm}')}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
