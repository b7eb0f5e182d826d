"""Random search's GPU-seconds over uniform random orders of recorded configs: a draw is a
permutation and a running sum of the recorded walls (compile included) until a config within 2%
of the best. Used by bench/random_baseline.py (a landscape's rows) and the replay's report (its
random runs' median beside the drawn orders' median)."""

from __future__ import annotations

import random
import statistics
from typing import Any

from bench.replay_lib.run import WITHIN


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
