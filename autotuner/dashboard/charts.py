"""Chart data for the study page, computed from `trial_reads.get_study_detail`'s chart rows.

The charts stay readable at 10,000 trials: the throughput-over-trials scatter keeps, per bucket
of consecutive trial numbers, the slowest and the fastest trial (min/max downsampling: the
envelope, every outlier that sets it, is drawn), while the best-so-far line is exact (every
trial that raised it). The throughput/memory scatter keeps its Pareto front exactly and, past
MAX_PARETO_POINTS measured trials, one trial per cell of a grid for the rest. The per-knob
strip plots draw, for each value, at most STRIP_POINTS trials spread evenly over its range of
tokens/s (quantiles: the slowest and the fastest always among them), its exact median, and
count its failures. Where a scatter draws fewer points than it has trials, the page says how
it chose them (dashboard.js).

`chart_data` computes them from every trial's row; `KeptCharts` gives the same from ended trials
folded in once and the running tail (the page's: charts_kept.py).
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from autotuner.purpose import END_CHECKS, Purpose
from autotuner.search.pareto import pareto_sweep

MAX_PROGRESS_POINTS = 1_000  # 500 buckets of min and max
GRID = 120  # the throughput/memory scatter: at most GRID x GRID cells besides the front
MAX_PARETO_POINTS = 2_000  # up to this many measured trials the scatter draws every one
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
    best = _BestSoFar()
    for r in ok:
        best.add(r)
    points = [[r["number"], r["tokens_per_s"]] for r in ok]
    return ended_line(_progress_points(points, best.line, max_points), final)


def _progress_points(
    points: list[list[float]], line: list[list[float]], max_points: int = MAX_PROGRESS_POINTS
) -> dict[str, Any]:
    """The progress chart before its line's ends (`ended_line`): the points (bucketed past
    `max_points`), the line's steps, and the last measured trial's number in `last`."""
    last = points[-1][0] if points else None
    shown = _min_max_buckets(points, max_points // 2) if len(points) > max_points else points
    return {
        "points": shown,
        "best": line,
        "measured": len(points),
        "shown": len(shown),
        "last": last,
    }


def ended_line(progress: dict[str, Any], final: float | None) -> dict[str, Any]:
    """`progress` as the page shows it: the line ends on `final` where that differs from its
    last step, and runs on to the last measured trial. A new dict and line: `progress` may be
    kept (charts_kept.py) and is not changed."""
    out = {k: v for k, v in progress.items() if k != "last"}
    line = out["best"] = list(progress["best"])
    last = progress["last"]
    if final is not None and line and not math.isclose(line[-1][1], final):
        line.append([last, final])
    if line and line[-1][0] != last:
        line.append([last, line[-1][1]])
    return out


Key = tuple[tuple[str, Any], ...]


class _BestSoFar:
    """[number, value] wherever the leading config's pooled median changed, fed the measured
    trials in number order (`add`). Each config's rank (re-measured first, then its median)
    goes on a heap as it changes; stale entries (a rank since replaced) are dropped when they
    reach the top: linear-logarithmic in the trials, where looking over every config at each
    re-measurement of the leader is quadratic at the end of a big study (100 re-measurements x
    9,000 configs at 10,000 trials). `fork` copies it cheaply (a pooled list is replaced, never
    appended to), so a kept one can be fed a study's running tail and stay as it was."""

    def __init__(self) -> None:
        self.values: dict[Key, list[float]] = {}
        self.ranks: dict[Key, tuple[bool, float]] = {}
        self.heap: list[tuple[bool, float, int, Key]] = []  # negated ranks: a min-heap
        self.line: list[list[float]] = []
        self.fed = 0  # measured trials fed: each one's tie-break on the heap

    def fork(self) -> _BestSoFar:
        other = _BestSoFar()
        other.values, other.ranks = dict(self.values), dict(self.ranks)
        other.heap, other.line, other.fed = list(self.heap), list(self.line), self.fed
        return other

    def add(self, r: Row) -> None:
        i = self.fed
        self.fed += 1
        if not r.get("candidate", True) or r.get("purpose") in END_CHECKS:
            return
        key = tuple(r["params"].items())  # in the space's knob order (trial_reads.chart_rows)
        pooled = self.values[key] = [*self.values.get(key, ()), r["tokens_per_s"]]
        ranks, heap = self.ranks, self.heap
        remeasured = r.get("purpose") == Purpose.REMEASURE or ranks.get(key, (False, 0.0))[0]
        ranks[key] = (remeasured, pooled[0] if len(pooled) == 1 else statistics.median(pooled))
        heapq.heappush(heap, (not remeasured, -ranks[key][1], i, key))
        while (-heap[0][1], heap[0][0]) != (ranks[heap[0][3]][1], not ranks[heap[0][3]][0]):
            heapq.heappop(heap)
        value = -heap[0][1]
        if not self.line or value != self.line[-1][1]:
            self.line.append([r["number"], value])


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
    """The front (exact, by increasing memory) and the other measured trials (past
    MAX_PARETO_POINTS, one per grid cell), each as [peak GiB, tokens/s, number]."""
    ok = [r for r in _measured(rows) if r["peak_mem_gib"] is not None]
    points = [(r["peak_mem_gib"], r["tokens_per_s"], r["number"]) for r in ok]
    return _pareto(points, front_of(points, range(len(points))), grid)


MemPoint = tuple[float, float, int]  # (peak GiB, tokens/s, number)


def front_of(points: Sequence[MemPoint], among: Iterable[int]) -> list[int]:
    """The indices of `points` on the front of those `among` (in index order). The front of
    all the points is the front of any part's front and the rest: a point off a part's front
    is beaten by one before it in the sweep's order, which stays before it among more."""
    among = list(among)
    on = pareto_sweep([(points[i][1], points[i][0]) for i in among])
    return sorted(among[j] for j in on)


def _pareto(points: Sequence[MemPoint], front: list[int], grid: int = GRID) -> dict[str, Any]:
    """The chart from the measured points (in number order) and the indices of those on the
    front."""
    if not points:
        return {"front": [], "others": [], "measured": 0, "grid": grid}
    on_front = set(front)
    mems = [p[0] for p in points]
    tps = [p[1] for p in points]
    x0, y0 = min(mems), min(tps)
    dx = (max(mems) - x0) / grid or 1.0
    dy = (max(tps) - y0) / grid or 1.0
    others: list[MemPoint] = [p for i, p in enumerate(points) if i not in on_front]
    if len(points) > MAX_PARETO_POINTS:  # more than the chart's pixels can tell apart
        cells: dict[tuple[int, int], MemPoint] = {}
        for p in others:
            cells.setdefault((int((p[0] - x0) / dx), int((p[1] - y0) / dy)), p)
        others = list(cells.values())
    return {
        "front": [list(points[i]) for i in sorted(front, key=lambda i: points[i][0])],
        "others": [list(p) for p in others],
        "measured": len(points),
        "grid": grid,  # the page says so where the others are fewer than measured
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
    cells: dict[str, dict[str, StripCell]] = {}
    add_to_strips(cells, rows)
    return _strips(cells, per_value)


class StripCell:
    """One knob value's measured tokens/s and failures."""

    __slots__ = ("failed", "shown", "tps")

    def __init__(self, tps: list[float] | None = None, failed: int = 0) -> None:
        self.tps: list[float] = tps if tps is not None else []
        self.failed = failed
        self.shown: dict[str, Any] | None = None  # what the page draws of it, once computed

    def view(self, per_value: int) -> dict[str, Any]:
        if self.shown is None:
            self.shown = {
                # Whole tokens/s: a dot's position needs no more (and 10k pages stay small).
                "tps": [round(x) for x in _quantile_sample(self.tps, per_value)],
                "measured": len(self.tps),
                "failed": self.failed,
                "median": statistics.median(self.tps) if self.tps else None,
            }
        return self.shown


def add_to_strips(cells: dict[str, dict[str, StripCell]], rows: Iterable[Row]) -> set[StripCell]:
    """`rows`' measurements and failures added to their cells (knobs and values in the order
    they first come); the cells changed."""
    changed: set[StripCell] = set()
    for r in rows:
        failed = r["state"] in FAILED
        ok = r["state"] == "complete" and r["tokens_per_s"]
        if not (failed or ok):
            continue
        for knob, value in r["params"].items():
            by_value = cells.get(knob)
            if by_value is None:
                by_value = cells[knob] = {}
            cell = by_value.get(str(value))
            if cell is None:
                cell = by_value[str(value)] = StripCell()
            if ok:
                cell.tps.append(r["tokens_per_s"])
            else:
                cell.failed += 1
            cell.shown = None
            changed.add(cell)
    return changed


def _strips(cells: dict[str, dict[str, StripCell]], per_value: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for knob, by_value in cells.items():
        values = _value_order(set(by_value))
        out[knob] = {"values": values, "cells": [by_value[v].view(per_value) for v in values]}
    return out


def chart_data(rows: Sequence[Row], *, final: float | None = None) -> dict[str, Any]:
    """The study page's charts; `final`: the recommendation's tokens/s (progress_series)."""
    return {
        "progress": progress_series(rows, final=final),
        "pareto": pareto_points(rows),
        "strips": knob_strips(rows),
    }


class KeptCharts:
    """The charts' data folded in from a study's ended trials, in number order (`fold`), so
    a page reads only the trials since (its running tail, `charts`) instead of every trial: at
    50,000 trials the full computation took 1.5 s a page. An ended trial's row does not change
    where the charts read it (storage/trial_rows.py `unfinished_from`). What it keeps: the
    measured points in number order, the best-so-far line's state, the Pareto front of the
    points with a peak, and each knob value's tokens/s sorted. `charts(tail)` equals
    `chart_data(every row)` less the line's ends (`ended_line`); tests/dashboard/
    test_charts_kept.py checks it against the full computation."""

    def __init__(self) -> None:
        self.points: list[list[float]] = []  # [number, tokens/s] of the measured trials
        self.best = _BestSoFar()
        self.mem_points: list[MemPoint] = []  # the measured trials with a peak
        self.front: list[int] = []  # indices into mem_points on their front
        self.cells: dict[str, dict[str, StripCell]] = {}  # each value's tps kept sorted

    def fold(self, rows: Sequence[Row]) -> None:
        """Add ended trials numbered above every one folded before, in number order."""
        start = len(self.mem_points)
        for r in _measured(rows):
            self.points.append([r["number"], r["tokens_per_s"]])
            self.best.add(r)
            if r["peak_mem_gib"] is not None:
                self.mem_points.append((r["peak_mem_gib"], r["tokens_per_s"], r["number"]))
        if len(self.mem_points) > start:
            among = [*self.front, *range(start, len(self.mem_points))]
            self.front = front_of(self.mem_points, among)
        for cell in add_to_strips(self.cells, rows):
            cell.tps.sort()  # sorted once per fold: the sample and the median read it so

    def charts(self, tail: Sequence[Row]) -> dict[str, Any]:
        """The charts of the trials folded and then `tail` (the trials numbered above them),
        with the progress chart's line before its ends (`ended_line`). Nothing kept changes."""
        ok = _measured(tail)
        best = self.best.fork() if ok else self.best
        for r in ok:
            best.add(r)
        points = self.points + [[r["number"], r["tokens_per_s"]] for r in ok]
        mem_points = self.mem_points + [
            (r["peak_mem_gib"], r["tokens_per_s"], r["number"])
            for r in ok
            if r["peak_mem_gib"] is not None
        ]
        front = self.front
        if len(mem_points) > len(self.mem_points):
            front = front_of(mem_points, [*front, *range(len(self.mem_points), len(mem_points))])
        # The tail's cells: copies of the kept ones with the tail's trials added.
        cells = {knob: dict(by_value) for knob, by_value in self.cells.items()}
        added: dict[str, dict[str, StripCell]] = {}
        add_to_strips(added, tail)
        for knob, by_value in added.items():
            mine = cells.setdefault(knob, {})
            for value, extra in by_value.items():
                kept = mine.get(value)
                if kept is None:
                    mine[value] = StripCell(sorted(extra.tps), extra.failed)
                else:
                    both = sorted(kept.tps + extra.tps)
                    mine[value] = StripCell(both, kept.failed + extra.failed)
        return {
            "progress": _progress_points(points, list(best.line)),
            "pareto": _pareto(mem_points, front),
            "strips": _strips(cells, STRIP_POINTS),
        }
