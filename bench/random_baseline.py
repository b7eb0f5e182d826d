"""Random search's GPU-seconds on a recorded landscape, without the noise of 20 runs.

The replay's random search draws the recorded configs in a uniform random order and pays each
one's recorded wall (compile included) until one is within 2% of the best
(`bench/replay.py`, strategy `random`). Its reported median is over 20 runs, and a median of
20 draws moves: on the Llama 1B landscape of 2026-12-04 one config fewer moved it from 2,921 to
2,199 GPU-s, and the ratio "ours / random" of a row with it. This script draws many orders
instead (no study is run: a draw is a permutation and a running sum) and reports the median
those 20-run medians estimate, and how far a 20-run median typically lies from it (its 10th
and 90th percentiles).

    python bench/random_baseline.py bench/results/landscape_llama_3b_h200.json \
        --global-batch 32768 [--drop-best 1]

What it leaves out: the coordinator's retry of a crashed trial (the replay's random pays a
crash twice) and the trial budget (a run that has not hit by the end of the landscape pays
every wall; the replay counts it as a miss). The recorded Llama landscapes hold no crash.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.replay_lib.run import WITHIN
from bench.throughput_loo import held_universe


def recorded(path: str, global_batch: int | None) -> list[tuple[float, float]]:
    """(tokens/s, wall s) of every recorded config the replay searches (0 tokens/s: failed)."""
    table = held_universe(path, global_batch)[3]
    return [(r.tokens_per_s or 0.0, r.wall_s or 0.0) for r in table.values()]


def within(configs: list[tuple[float, float]]) -> list[bool]:
    """For each config, whether its tokens/s is within 2% of the best's."""
    best = max(t for t, _ in configs)
    return [t >= (1 - WITHIN) * best for t, _ in configs]


def gpu_s_until_within(
    configs: list[tuple[float, float]], *, draws: int, seed: int = 0
) -> list[float]:
    """GPU-seconds random search pays until a config within 2% of the best, for `draws`
    uniform random orders of `configs`."""
    good = within(configs)
    rng = random.Random(seed)
    order = list(range(len(configs)))
    out = []
    for _ in range(draws):
        rng.shuffle(order)
        paid = 0.0
        for i in order:
            paid += configs[i][1]
            if good[i]:
                break
        out.append(paid)
    return out


def expected_gpu_s(configs: list[tuple[float, float]]) -> float:
    """The mean in closed form: each config outside 2% is drawn before every one of the K inside
    with probability 1/(K+1), and the first one inside costs their mean wall."""
    good = within(configs)
    inside = [w for (_, w), g in zip(configs, good, strict=True) if g]
    outside = [w for (_, w), g in zip(configs, good, strict=True) if not g]
    return statistics.fmean(inside) + sum(outside) / (len(inside) + 1)


def summary(configs: list[tuple[float, float]], *, draws: int, runs: int) -> dict[str, Any]:
    costs = gpu_s_until_within(configs, draws=draws)
    rng = random.Random(1)
    medians = sorted(statistics.median(rng.sample(costs, runs)) for _ in range(2000))
    return {
        "configs": len(configs),
        "within_2pct": sum(within(configs)),
        "draws": draws,
        "median_gpu_s": round(statistics.median(costs), 1),
        "mean_gpu_s": round(statistics.fmean(costs), 1),
        "expected_gpu_s": round(expected_gpu_s(configs), 1),
        f"median_of_{runs}_p10": round(medians[len(medians) // 10], 1),
        f"median_of_{runs}_p90": round(medians[len(medians) * 9 // 10], 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("landscape", help="a landscape JSON (bench/assemble_landscape.py)")
    ap.add_argument("--global-batch", type=int, help="only the configs at this many tokens/step")
    ap.add_argument("--drop-best", type=int, default=0, help="remove the N best configs first")
    ap.add_argument("--draws", type=int, default=20000, help="random orders drawn")
    ap.add_argument("--runs", type=int, default=20, help="runs per replay median (its spread)")
    args = ap.parse_args(argv)
    configs = sorted(recorded(args.landscape, args.global_batch), reverse=True)[args.drop_best :]
    report = {
        "landscape": args.landscape,
        "global_batch": args.global_batch,
        "drop_best": args.drop_best,
    }
    report |= summary(configs, draws=args.draws, runs=args.runs)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
