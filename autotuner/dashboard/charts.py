"""Chart data computed from trial views: per-knob effects and the throughput/memory front."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from autotuner.study.recommend import pareto_sweep


def _measured(trials: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for t in trials if t["state"] == "complete" and t["tokens_per_s"]]


def knob_effects(trials: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """For each knob and value: how many trials, their median, best and worst tokens/s.

    Infeasible trials count too (as `failed`), since "this value always OOMs" is an effect.
    """
    effects: dict[str, dict[str, dict[str, Any]]] = {}
    for t in trials:
        if t["state"] not in ("complete", "infeasible"):
            continue
        for knob, value in t["params"].items():
            cell = effects.setdefault(knob, {}).setdefault(
                str(value), {"value": str(value), "tps": [], "failed": 0}
            )
            if t["state"] == "complete" and t["tokens_per_s"]:
                cell["tps"].append(t["tokens_per_s"])
            else:
                cell["failed"] += 1
    out: dict[str, list[dict[str, Any]]] = {}
    for knob, cells in effects.items():
        rows = []
        for cell in cells.values():
            tps = cell.pop("tps")
            cell.update(
                count=len(tps) + cell["failed"],
                median=statistics.median(tps) if tps else None,
                best=max(tps) if tps else None,
                worst=min(tps) if tps else None,
            )
            rows.append(cell)
        out[knob] = rows
    return out


def pareto_front(trials: Sequence[dict[str, Any]]) -> list[int]:
    """Trial numbers not beaten on both throughput (higher) and peak memory (lower)."""
    points = [t for t in _measured(trials) if t["peak_mem_gib"] is not None]
    front = pareto_sweep([(t["tokens_per_s"], t["peak_mem_gib"]) for t in points])
    return [points[i]["number"] for i in front]
