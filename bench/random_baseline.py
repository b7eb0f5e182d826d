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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.replay_lib.random_orders import expected_gpu_s, gpu_s_until_within, summary, within
from bench.throughput_loo import held_universe

__all__ = ["expected_gpu_s", "gpu_s_until_within", "main", "recorded", "summary", "within"]


def recorded(path: str, global_batch: int | None) -> list[tuple[float, float]]:
    """(tokens/s, wall s) of every recorded config the replay searches (0 tokens/s: failed)."""
    table = held_universe(path, global_batch)[3]
    return [(r.tokens_per_s or 0.0, r.wall_s or 0.0) for r in table.values()]


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
