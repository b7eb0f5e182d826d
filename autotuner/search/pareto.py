"""The Pareto front of throughput against memory: the points no other point beats on both value
(higher is better) and memory (lower is better).

One sweep finds it for every caller (`front_in_order`): over the points by increasing memory,
ties by decreasing value, a point is on the front when its value is above every one before it.
O(n) over a sorted order, O(n log n) in all (8,000 configs: milliseconds, where the all-pairs
comparison took 13 s). `pareto_sweep` sorts (value, memory) pairs into that order; the re-judge
keeps its configs sorted so once per study version and sweeps those that fit at each headroom
(study/recommend_measured.py's Fitting.pareto_front).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")


def front_in_order(order: Iterable[T], value: Callable[[T], float]) -> list[T]:
    """The items of `order` on the front, in that order. `order` must be by increasing memory,
    then decreasing value: an item is kept where its `value` is above every earlier item's.
    Of items equal in both, the first in `order` is kept."""
    front: list[T] = []
    best = float("-inf")
    for item in order:
        v = value(item)
        if v > best:
            front.append(item)
            best = v
    return front


def pareto_sweep(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the (value, memory) points on the front, by increasing memory. Of identical
    points, the first is kept (the sort is stable)."""
    order = sorted(range(len(points)), key=lambda i: (points[i][1], -points[i][0]))
    return front_in_order(order, lambda i: points[i][0])
