"""One Pareto front for the recommendation and the dashboard: sort and sweep, O(n log n),
checked against the all-pairs definition on random points with many ties."""

from __future__ import annotations

import random

from autotuner.dashboard.charts import pareto_points
from autotuner.search.pareto import pareto_sweep


def _all_pairs(points: list[tuple[float, float]]) -> set[tuple[float, float]]:
    return {
        (v, m)
        for v, m in points
        if not any(v2 >= v and m2 <= m and (v2 > v or m2 < m) for v2, m2 in points)
    }


def test_the_sweep_finds_the_all_pairs_front() -> None:
    rng = random.Random(7)
    for _ in range(200):
        points = [(rng.randint(0, 15), rng.randint(0, 15)) for _ in range(rng.randint(0, 40))]
        front = pareto_sweep(points)
        assert {points[i] for i in front} == _all_pairs(points)
        mems = [points[i][1] for i in front]
        assert mems == sorted(mems)  # by increasing memory, throughput increasing with it


def test_the_dashboard_uses_the_same_front() -> None:
    trials = [
        {"number": n, "state": "complete", "tokens_per_s": tps, "peak_mem_gib": mem, "params": {}}
        for n, tps, mem in [(0, 100.0, 10.0), (1, 90.0, 12.0), (2, 150.0, 20.0), (3, 80.0, 5.0)]
    ]
    assert [number for _, _, number in pareto_points(trials)["front"]] == [3, 0, 2]
