"""How accurate the cost model was: each prediction as the search had it at launch, summarised."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from autotuner.executors.base import Target
from autotuner.search.costmodel.model import CostModel
from autotuner.search.costmodel.throughput import ThroughputModel
from autotuner.spec import Knobs, ModelSpec, TrialResult


def sequential_errors(
    model: ModelSpec,
    trials: Iterable[tuple[int, Knobs, TrialResult]],
    *,
    num_gpus: int,
    on_cuda: bool,
    limit_gib: float | None,
) -> list[dict[str, Any]]:
    """For each measured trial in order: what the model predicted *before* it ran, and the error.

    Replays the study's calibration, so each prediction is exactly the one the search had when
    it launched the trial (later results never leak into earlier predictions).
    """
    cm = CostModel(model, num_gpus=num_gpus, on_cuda=on_cuda, limit_gib=limit_gib)
    out = []
    for number, knobs, result in trials:
        if result.peak_mem_gib and result.tokens_per_s:
            pred = cm.predict(knobs)
            out.append(
                {
                    "trial_number": number,
                    "predicted_gib": round(pred.allocated_gib, 3),
                    "measured_gib": round(result.peak_mem_gib, 3),
                    "rel_error": round(pred.allocated_gib / result.peak_mem_gib - 1.0, 4),
                }
            )
        cm.observe(knobs, result)
    return out


def throughput_errors(
    model: ThroughputModel, trials: Iterable[tuple[int, Knobs, TrialResult]]
) -> list[dict[str, Any]]:
    """`sequential_errors` for the throughput model: each measured trial's tokens/s as
    predicted before it ran (a fresh model replaying the study), with the sd it claimed."""
    tm = ThroughputModel(model.model, model.target, model.num_gpus)
    out = []
    for number, knobs, result in trials:
        if result.tokens_per_s and "predicted" not in result.notes:
            pred = tm.predict(knobs)
            out.append(
                {
                    "trial_number": number,
                    "predicted_tokens_per_s": round(pred.tokens_per_s, 1),
                    "predicted_sd": round(pred.sd, 1),
                    "measured_tokens_per_s": round(result.tokens_per_s, 1),
                    "rel_error": round(pred.tokens_per_s / result.tokens_per_s - 1.0, 4),
                }
            )
        tm.observe(knobs, result)
    return out


def leave_one_out_errors(
    model: ModelSpec, target: Target, measured: Sequence[tuple[Knobs, TrialResult]]
) -> list[float]:
    """Each measured config's relative tokens/s error (+: predicted too fast) from a throughput
    model fitted to all the others: how well it predicts a config it has not seen."""
    errors = []
    for i, (knobs, result) in enumerate(measured):
        tm = ThroughputModel(model, target, 1)
        for j, (k, r) in enumerate(measured):
            if j != i:
                tm.observe(k, r, fit=False)
        tm.refit()
        errors.append(tm.predict(knobs).tokens_per_s / (result.tokens_per_s or 1.0) - 1.0)
    return errors


def error_summary(errors: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median absolute error of the at-launch predictions, overall and by halves of the study."""
    if not errors:
        return {"measured": 0}
    abs_err = [abs(e["rel_error"]) for e in errors]
    half = len(abs_err) // 2
    summary: dict[str, Any] = {
        "measured": len(errors),
        "median_abs_rel_error": round(float(np.median(abs_err)), 4),
        "max_abs_rel_error": round(max(abs_err), 4),
        "first_prediction_rel_error": errors[0]["rel_error"],
    }
    if half >= 1:
        summary["first_half_median_abs_rel_error"] = round(float(np.median(abs_err[:half])), 4)
        summary["second_half_median_abs_rel_error"] = round(float(np.median(abs_err[half:])), 4)
    return summary
