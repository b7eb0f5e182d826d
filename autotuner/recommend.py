"""The recommendation: the best measured trial, its margin over the runner-up, and whether
that margin is larger than the measurement noise (otherwise it is called a tie)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotuner.objective import Objective
from autotuner.spec import TrialResult
from autotuner.storage.models import Trial, TrialState


def _noise_rel(trial: Trial) -> float:
    if not trial.result:
        return 0.0
    return TrialResult.model_validate(trial.result).spread_rel or 0.0


def recommend(trials: Sequence[Trial], objective: Objective) -> dict[str, Any] | None:
    """A JSON-able summary of the winner, or None when no trial completed."""
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.objective_value]
    if not done:
        return None
    ranked = sorted(done, key=lambda t: t.objective_value or 0.0, reverse=True)
    best = ranked[0]
    result = TrialResult.model_validate(best.result)
    rec: dict[str, Any] = {
        "trial_number": best.number,
        "objective": objective.value,
        "objective_value": best.objective_value,
        "params": best.params,
        "knobs": best.config.get("knobs", {}),
        "model": best.config.get("model", {}),
        "tokens_per_s": result.tokens_per_s,
        "tokens_per_s_min": result.tokens_per_s_min,
        "tokens_per_s_max": result.tokens_per_s_max,
        "tokens_per_s_per_gpu": result.tokens_per_s_per_gpu,
        "mfu": result.mfu,
        "peak_mem_gib": result.peak_mem_gib,
        "compile_s": result.compile_s,
        "fingerprint": result.fingerprint.model_dump() if result.fingerprint else None,
        "completed_trials": len(done),
        "runner_up": None,
    }
    if len(ranked) > 1:
        second = ranked[1]
        margin = (best.objective_value or 0) / (second.objective_value or 1) - 1.0
        noise = max(_noise_rel(best), _noise_rel(second))
        rec["runner_up"] = {
            "trial_number": second.number,
            "objective_value": second.objective_value,
            "params": second.params,
            "margin_rel": margin,
            "noise_rel": noise,
            # Medians closer than their spread are indistinguishable: say so.
            "tie": margin <= noise,
        }
    return rec
