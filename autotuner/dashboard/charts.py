"""Chart data for the study page, computed from `trial_reads.get_study_detail`'s chart rows.

The charts stay readable at 10,000 trials: the throughput-over-trials scatter keeps, per bucket
of consecutive trial numbers, the slowest and the fastest trial (min/max downsampling: the
envelope, every outlier that sets it, is drawn), while the best-so-far line is exact (every
trial that raised it). The throughput/memory scatter keeps its Pareto front exactly and one
trial per cell of a grid for the rest. The per-knob strip plots draw, for each value, at most
STRIP_POINTS trials spread evenly over its range of tokens/s (quantiles: the slowest and the
fastest always among them), its exact median, and count its failures.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Sequence
from typing import Any

from autotuner.purpose import END_CHECKS, Purpose
from autotuner.search.pareto import pareto_sweep

MAX_PROGRESS_POINTS = 1_000  # 500 buckets of min and max
GRID = 120  # the throughput/memory scatter: at most GRID x GRID cells besides the front
STRIP_POINTS = 150  # points per knob value in a strip plot
FAILED = ("infeasible", "failed", "lost")  # the trials a strip plot marks as failures

Row = dict[str, Any]


def _measured(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if r["state"] == "complete" and r["tokens_per_s"]]


def progress_series(
    rows: Sequence[Row], max_points: int = MAX_PROGRESS_POINTS, *, final: float | None = None
) -> dict[str, Any]:
    """Measured trials as [number, tokens/s] (min/max per bucket past `max_points`), and the
    best so far as the exact steps [number, best] (plus the last trial, to end the line).

    The line is the recommendation's number as it stood after each trial, not the fastest
    single trial: each config's measurements pooled (their median), re-measured configs ahead
    of the rest, as study/recommend.py ranks them, so a first measurement that a re-measurement
    revised down steps the line down with it. It counts only the trials the recommendation may
    stand on (`candidate`, and no end check): a faster trial that left too little memory free
    is drawn as a point but does not raise it. `final`: the recommendation's own value, where
    it went past the fastest config (a failed end check, a tie settled for the reference
    numerics): the line ends on it, so the chart and the page's headline read one number."""
    ok = _measured(rows)
    best_line = _best_so_far(ok)
    if final is not None and best_line and not math.isclose(best_line[-1][1], final):
        best_line.append([ok[-1]["number"], final])
    if best_line and best_line[-1][0] != ok[-1]["number"]:
        best_line.append([ok[-1]["number"], best_line[-1][1]])
    points = [[r["number"], r["tokens_per_s"]] for r in ok]
    if len(points) > max_points:
        points = _min_max_buckets(points, max_points // 2)
    return {"points": points, "best": best_line, "measured": len(ok), "shown": len(points)}


def _best_so_far(ok: Sequence[Row]) -> list[list[float]]:
    """[number, value] wherever the leading config's pooled median changed. Each config's rank
    (re-measured first, then its median) goes on a heap as it changes; stale entries (a rank
    since replaced) are dropped when they reach the top: linear-logarithmic in the trials,
    where looking over every config at each re-measurement of the leader is quadratic at the
    end of a big study (100 re-measurements x 9,000 configs at 10,000 trials)."""
    Key = tuple[tuple[str, Any], ...]
    values: dict[Key, list[float]] = {}
    ranks: dict[Key, tuple[bool, float]] = {}
    heap: list[tuple[bool, float, int, Key]] = []  # negated ranks: heapq is a min-heap
    line: list[list[float]] = []
    for i, r in enumerate(ok):
        if not r.get("candidate", True) or r.get("purpose") in END_CHECKS:
            continue
        key = tuple(r["params"].items())  # in the space's knob order (trial_reads._chart_rows)
        pooled = values.setdefault(key, [])
        pooled.append(r["tokens_per_s"])
        remeasured = r.get("purpose") == Purpose.REMEASURE or ranks.get(key, (False, 0.0))[0]
        ranks[key] = (remeasured, pooled[0] if len(pooled) == 1 else statistics.median(pooled))
        heapq.heappush(heap, (not remeasured, -ranks[key][1], i, key))
        while (-heap[0][1], heap[0][0]) != (ranks[heap[0][3]][1], not ranks[heap[0][3]][0]):
            heapq.heappop(heap)
        value = -heap[0][1]
        if not line or value != line[-1][1]:
            line.append([r["number"], value])
    return line


def _min_max_buckets(points: list[list[float]], buckets: int) -> list[list[float]]:
    """Of each run of consecutive points, the lowest and the highest, in x order."""
    size = -(-len(points) // buckets)
    out: list[list[float]] = []
    for start in range(0, len(points), size):
        chunk = points[start : start + size]
        low = min(chunk, key=lambda p: p[1])
        high = max(chunk, key=lambda p: p[1])
        out.extend(sorted({id(low): low, id(high): high}.values(), key=lambda p: p[0]))
    return out


def pareto_points(rows: Sequence[Row], grid: int = GRID) -> dict[str, Any]:
    """The front (exact, by increasing memory) and the other measured trials, one per grid
    cell, each as [peak GiB, tokens/s, number]."""
    ok = [r for r in _measured(rows) if r["peak_mem_gib"] is not None]
    if not ok:
        return {"front": [], "others": [], "measured": 0}
    on_front = set(pareto_sweep([(r["tokens_per_s"], r["peak_mem_gib"]) for r in ok]))
    front = sorted((ok[i] for i in on_front), key=lambda r: r["peak_mem_gib"])
    mems = [r["peak_mem_gib"] for r in ok]
    tps = [r["tokens_per_s"] for r in ok]
    x0, y0 = min(mems), min(tps)
    dx = (max(mems) - x0) / grid or 1.0
    dy = (max(tps) - y0) / grid or 1.0
    cells: dict[tuple[int, int], Row] = {}
    for i, r in enumerate(ok):
        if i not in on_front:
            cell = (int((r["peak_mem_gib"] - x0) / dx), int((r["tokens_per_s"] - y0) / dy))
            cells.setdefault(cell, r)

    def point(r: Row) -> list[float]:
        return [r["peak_mem_gib"], r["tokens_per_s"], r["number"]]

    return {
        "front": [point(r) for r in front],
        "others": [point(r) for r in cells.values()],
        "measured": len(ok),
    }


def _value_order(values: set[str]) -> list[str]:
    """Knob values in their natural order: numerically when every one is a number."""
    try:
        return sorted(values, key=float)
    except ValueError:
        return sorted(values)


def _quantile_sample(values: list[float], n: int) -> list[float]:
    """At most `n` of `values`, evenly spaced in rank: the distribution's shape, its ends kept."""
    ordered = sorted(values)
    if len(ordered) <= n:
        return ordered
    step = (len(ordered) - 1) / (n - 1)
    return [ordered[round(i * step)] for i in range(n)]


def knob_strips(rows: Sequence[Row], per_value: int = STRIP_POINTS) -> dict[str, dict[str, Any]]:
    """For each knob: its values in order, and per value the measured trials' tokens/s (a
    quantile sample past `per_value`), their median, how many were measured and how many
    failed (infeasible, failed or lost: "this value always OOMs" shows as a column of failures
    and no points). Pruned trials never ran and are not drawn."""
    cells: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        failed = r["state"] in FAILED
        ok = r["state"] == "complete" and r["tokens_per_s"]
        if not (failed or ok):
            continue
        for knob, value in r["params"].items():
            cell = cells.setdefault(knob, {}).setdefault(str(value), {"tps": [], "failed": 0})
            if ok:
                cell["tps"].append(r["tokens_per_s"])
            else:
                cell["failed"] += 1
    out: dict[str, dict[str, Any]] = {}
    for knob, by_value in cells.items():
        values = _value_order(set(by_value))
        out[knob] = {
            "values": values,
            "cells": [
                {
                    # Whole tokens/s: a dot's position needs no more (and 10k pages stay small).
                    "tps": [round(x) for x in _quantile_sample(by_value[v]["tps"], per_value)],
                    "measured": len(by_value[v]["tps"]),
                    "failed": by_value[v]["failed"],
                    "median": statistics.median(by_value[v]["tps"]) if by_value[v]["tps"] else None,
                }
                for v in values
            ],
        }
    return out


def chart_data(rows: Sequence[Row], *, final: float | None = None) -> dict[str, Any]:
    """The study page's charts; `final`: the recommendation's tokens/s (progress_series)."""
    return {
        "progress": progress_series(rows, final=final),
        "pareto": pareto_points(rows),
        "strips": knob_strips(rows),
    }
