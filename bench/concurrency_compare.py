"""One model tuned twice on one node, shown 1 GPU and then 2: how soon each study measured a
config near the best either found, and whether a trial that ran beside another measured slower
than the same config did alone (interference: shared host cores, PCIe, power).

    python3 bench/concurrency_compare.py trials-1gpu.json trials-2gpu.json [--out F.json]

Each input is `autotuner trials STUDY --all --json`. The commands that make them are in
bench/gpu_plan.md (the 2-GPU rows).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from pathlib import Path
from typing import Any

SEARCH = ("expert-default", "seed", "search")
NEAR_BEST = 0.02  # "reached the best": within 2% of the best tokens/s either study measured


def _time(value: str) -> float:
    return dt.datetime.fromisoformat(value).timestamp()


def _measured(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        t
        for t in trials
        if t["state"] == "complete"
        and t["purpose"] in SEARCH
        and t["tokens_per_s"]
        and t["started_at"]
        and t["finished_at"]
    ]


def _key(t: dict[str, Any]) -> str:
    return json.dumps(t["params"], sort_keys=True)


def _overlapped(t: dict[str, Any], trials: list[dict[str, Any]]) -> bool:
    """Whether another trial of the study ran during part of this one."""
    start, end = _time(t["started_at"]), _time(t["finished_at"])
    return any(
        o is not t
        and o["started_at"]
        and o["finished_at"]
        and _time(o["started_at"]) < end
        and _time(o["finished_at"]) > start
        for o in trials
    )


def study_summary(trials: list[dict[str, Any]], best: float) -> dict[str, Any]:
    """Wall time, measured trials, and when the study first finished a trial near `best`."""
    timed = [t for t in trials if t["started_at"] and t["finished_at"]]
    if not timed:
        return {"wall_s": None, "measured": 0, "near_best_s": None}
    origin = min(_time(t["started_at"]) for t in timed)
    wall = max(_time(t["finished_at"]) for t in timed) - origin
    near = [
        _time(t["finished_at"]) - origin
        for t in _measured(trials)
        if t["tokens_per_s"] >= best * (1 - NEAR_BEST)
    ]
    return {
        "wall_s": round(wall, 1),
        "measured": len(_measured(trials)),
        "near_best_s": round(min(near), 1) if near else None,
    }


def interference(alone: list[dict[str, Any]], beside: list[dict[str, Any]]) -> dict[str, Any]:
    """Configs measured in both studies whose 2-GPU trial overlapped another trial: their
    tokens/s over the 1-GPU study's, and how many fell below the 1-GPU trial's repeat spread."""
    solo = {_key(t): t for t in _measured(alone)}
    pairs = []
    for t in _measured(beside):
        ref = solo.get(_key(t))
        if ref is None or not _overlapped(t, beside):
            continue
        floor = ref["tokens_per_s_min"] or ref["tokens_per_s"]
        pairs.append(
            {
                "params": t["params"],
                "ratio": t["tokens_per_s"] / ref["tokens_per_s"],
                "below_spread": t["tokens_per_s"] < floor,
            }
        )
    ratios = [p["ratio"] for p in pairs]
    return {
        "pairs": len(pairs),
        "median_ratio": round(statistics.median(ratios), 4) if ratios else None,
        "below_spread": sum(p["below_spread"] for p in pairs),
        "each": pairs,
    }


def compare(one: list[dict[str, Any]], two: list[dict[str, Any]]) -> dict[str, Any]:
    best = max((t["tokens_per_s"] for t in _measured(one) + _measured(two)), default=0.0)
    return {
        "best_tokens_per_s": best,
        "one_gpu": study_summary(one, best),
        "two_gpus": study_summary(two, best),
        "interference": interference(one, two),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("one_gpu", type=Path, help="trials --all --json of the 1-GPU study")
    parser.add_argument("two_gpus", type=Path, help="trials --all --json of the 2-GPU study")
    parser.add_argument("--out", type=Path, help="write the comparison here as JSON")
    args = parser.parse_args(argv)
    result = compare(json.loads(args.one_gpu.read_text()), json.loads(args.two_gpus.read_text()))
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
