"""Statistics over the runs of one strategy, and the cost model checked offline."""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

from autotuner.executors.base import Target
from autotuner.search.costmodel import CostModel
from autotuner.search.policy import Z_PRUNE
from autotuner.search.space import SearchSpace
from autotuner.spec import (
    FailureClass,
    ModelSpec,
    TrialResult,
    TrialStatus,
)

# --------------------------------------------------------------------------- offline cost model


def cost_model_offline(
    table: dict[str, TrialResult], space: SearchSpace, model: ModelSpec, target: Target
) -> dict[str, Any]:
    """Predicted OOM against every recorded config: uncalibrated, and calibrated on all the
    other recorded configs (leave-one-out), at the pruning threshold the search uses."""
    items = []
    for key, result in table.items():
        params = json.loads(key)
        try:
            knobs = space.knobs_for(params, model, 1)
        except ValueError:
            continue
        if result.status == TrialStatus.OK or result.failure_class == FailureClass.OOM:
            items.append((knobs, result))
    limit = target.memory_gib
    out: dict[str, Any] = {"configs": len(items), "limit_gib": limit, "z": Z_PRUNE}
    for mode in ("uncalibrated", "leave_one_out"):
        tp = fp = fn = tn = 0
        errs = []
        for i, (knobs, result) in enumerate(items):
            cm = CostModel(model, num_gpus=1, on_cuda=target.device_type != "cpu", limit_gib=limit)
            if mode == "leave_one_out":
                for j, (k2, r2) in enumerate(items):
                    if j != i:
                        cm.observe(k2, r2, fit=False)
                cm.calibration.refit()
            pred = cm.predict(knobs)
            is_oom = result.failure_class == FailureClass.OOM
            said = pred.surely_over(Z_PRUNE)
            tp += said and is_oom
            fp += said and not is_oom
            fn += (not said) and is_oom
            tn += (not said) and not is_oom
            if result.peak_mem_gib:
                errs.append(abs(pred.allocated_gib / result.peak_mem_gib - 1))
        out[mode] = {
            "tp": tp,
            "fp": fp,
            "fn": fn,
            "tn": tn,
            "precision": _ratio(tp, tp + fp),
            "recall": _ratio(tp, tp + fn),
            "median_abs_rel_error_peak": round(statistics.median(errs), 4) if errs else None,
        }
    return out


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 3) if b else None


# --------------------------------------------------------------------------- summary


def summarise(runs: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    def stats(key: str) -> dict[str, Any]:
        vals = [r[key] if r[key] is not None else math.inf for r in runs]
        vals.sort()
        p90 = vals[min(len(vals) - 1, math.ceil(0.9 * len(vals)) - 1)]
        return {
            "median": _num(statistics.median(vals)),
            "p90": _num(p90),
            "mean_of_hits": _num(statistics.mean([v for v in vals if v != math.inf] or [math.inf])),
        }

    pred = {k: sum(r["predicted_oom"][k] for r in runs) for k in ("tp", "fp", "fn")}
    out = {
        "runs": len(runs),
        "hit_rate": round(sum(r["trials_to_2pct"] is not None for r in runs) / len(runs), 3),
        "trials_to_2pct": stats("trials_to_2pct"),
        "gpu_s_to_2pct": stats("gpu_s_to_2pct"),
        "launched_mean": round(statistics.mean(r["launched"] for r in runs), 1),
        "gpu_s_total_mean": round(statistics.mean(r["gpu_s_total"] for r in runs), 1),
        "ooms_launched_total": sum(r["ooms_launched"] for r in runs),
        "ooms_launched_mean": round(statistics.mean(r["ooms_launched"] for r in runs), 2),
        "ooms_before_2pct_mean": round(statistics.mean(r["ooms_before_2pct"] for r in runs), 2),
        "impossible_launched_total": sum(r["impossible_launched"] for r in runs),
        "recommended_within_2pct": sum(bool(r["recommended_within"]) for r in runs),
        "predicted_oom": {
            **pred,
            "precision": _ratio(pred["tp"], pred["tp"] + pred["fp"]),
            "recall": _ratio(pred["tp"], pred["tp"] + pred["fn"]),
        },
        "budget": budget,
    }
    if runs and "minutes" in runs[0]:
        out["time_budget"] = time_budget(runs)
    return out


def time_budget(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """What studies on simulated time recommended (run_once with `minutes`)."""
    rel = [r["recommended_rel"] for r in runs]
    return {
        "recommended_rel_median": round(statistics.median(rel), 4),
        "recommended_rel_min": min(rel),
        "within_3pct": sum(bool(r["recommended_within_3pct"]) for r in runs),
        "search_trials_median": statistics.median(r["search_trials"] for r in runs),
        "distinct_configs_median": statistics.median(r["distinct_configs"] for r in runs),
        "other_micro_batch": sum(bool(r["other_micro_batch"]) for r in runs),
        "minutes_median": round(statistics.median(r["minutes"] for r in runs), 2),
        "minutes_max": max(r["minutes"] for r in runs),
    }


def _num(x: float) -> float | None:
    return None if x == math.inf else round(x, 2)
