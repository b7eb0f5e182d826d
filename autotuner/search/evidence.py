"""Evidence for a recommendation: how accurate the cost and throughput models were, what was
pruned and why.

Read by people deciding whether to trust the recommendation: the cost model's at-launch errors
(replayed, so each is the prediction the search really had), its calibration, how many configs
were pruned as unsupported or as predicted OOM, and the rules learned from failures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotuner.flops import flops_per_token, param_count
from autotuner.search.costmodel import (
    CostModel,
    error_summary,
    sequential_errors,
    throughput_errors,
)
from autotuner.search.costmodel.throughput import ThroughputModel
from autotuner.search.progress import END_CHECKS
from autotuner.search.rules import LearnedRules
from autotuner.spec import Knobs, ModelSpec, TrialResult
from autotuner.storage.models import Trial, TrialState


def report(
    trials: list[Trial],
    *,
    model: ModelSpec,
    knobs: Callable[[dict[str, Any]], Knobs],
    cost: CostModel,
    throughput: ThroughputModel,
    learned: LearnedRules,
) -> dict[str, Any]:
    """Cost-model accuracy, learned rules and pruning counts of a study's trials."""
    measured = []
    for t in sorted(trials, key=lambda t: t.number):
        if t.state == TrialState.PRUNED or not t.result:
            continue
        result = TrialResult.model_validate(t.result)
        measured.append((t.number, t.knobs or knobs(t.params), result))  # as it ran
    errors = sequential_errors(
        model,
        measured,
        num_gpus=cost.num_gpus,
        on_cuda=cost.on_cuda,
        limit_gib=cost.limit_gib,
    )
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    cal = cost.calibration
    searched = _searched(trials)  # once: per measured trial it was a scan of every trial
    speed = throughput_errors(throughput, [m for m in measured if m[0] in searched])
    return {
        "cost_model": {
            "param_count": param_count(model),
            "flops_per_token": flops_per_token(model),
            "memory_limit_gib": cost.limit_gib,
            "calibration": {
                "measured": cal.measured,
                "fragmentation": round(cal.fragmentation, 3),
                "model_rel_sd": round(cal.rel_sd, 4),
            },
            "errors": error_summary(errors),
            "trials": errors[-200:],
            "predicted_oom_pruned": sum(1 for t in pruned if t.error_class == "oom"),
        },
        "throughput_model": {
            "model_rel_sd": round(throughput.rel_sd, 4),
            "errors": error_summary(speed),
            "trials": speed[-200:],
        },
        "pruned": {
            "unsupported": sum(1 for t in pruned if t.error_class == "unsupported"),
            "oom": sum(1 for t in pruned if t.error_class == "oom"),
            "headroom": sum(1 for t in pruned if t.error_class == "headroom"),
        },
        "learned_rules": [r.describe() for r in learned.rules],
    }


def _searched(trials: list[Trial]) -> set[int]:
    """Trials of the search itself (not the one-GPU reference or parity end checks)."""
    return {t.number for t in trials if t.purpose not in END_CHECKS}
