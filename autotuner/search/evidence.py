"""Evidence for a recommendation: how accurate the cost and throughput models were, what was
pruned and why.

Read by people deciding whether to trust the recommendation: the cost model's at-launch errors
(replayed, so each is the prediction the search really had: search/evidence_replay.py), its
calibration, how many configs were pruned as unsupported or as predicted OOM, and the rules
learned from failures.

The replay may come kept up with the study as its trials ended (study/end_kept.py): then
only the trials it has not seen are replayed here, and the report is the same as from a replay
of every trial.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotuner.flops import flops_per_token, param_count
from autotuner.search.costmodel import CostModel, error_summary
from autotuner.search.costmodel.throughput import ThroughputModel
from autotuner.search.evidence_replay import EXACT_REPLAY, Replay, settings
from autotuner.search.rules import LearnedRules
from autotuner.spec import Knobs, ModelSpec
from autotuner.storage.models import Trial, TrialState

SHOWN = 200  # the last predictions listed trial by trial


def report(
    trials: list[Trial],
    *,
    model: ModelSpec,
    knobs: Callable[[dict[str, Any]], Knobs],
    cost: CostModel,
    throughput: ThroughputModel,
    learned: LearnedRules,
    replay: Replay | None = None,
) -> dict[str, Any]:
    """Cost-model accuracy, learned rules and pruning counts of a study's trials. `replay`:
    one fed the study's first trials already (of these models: else a fresh one replays)."""
    if replay is None or replay.settings != settings(model, cost, throughput) or replay.ended:
        replay = Replay(model=model, knobs=knobs, cost=cost, throughput=throughput)
    replay.feed(sorted((t for t in trials if t.number >= replay.next), key=lambda t: t.number))
    (errors, memory_fits), (speed, speed_fits) = replay.predictions()
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    cal = cost.calibration
    return {
        "cost_model": {
            "param_count": param_count(model),
            "flops_per_token": flops_per_token(model),
            "memory_limit_gib": cost.limit_gib,
            "calibration": {
                "measured": cal.measured,
                # Of them, and of the OOMs, those of earlier studies (search/memory_history.py).
                "carried": len(cost.carried),
                "carried_from": sorted({c.study_id for c in cost.carried}),
                "fragmentation": round(cal.fragmentation(), 3),
                "fragmentation_by_allocator": {
                    mode: round(cal.fragmentation(mode), 3)
                    for mode in sorted({"default", *cal.reserved_ratios})
                },
                "model_rel_sd": round(cal.rel_sd, 4),
            },
            "errors": error_summary(errors),
            "trials": errors[-SHOWN:],
            "replay": {"refits": memory_fits, "exact_first": EXACT_REPLAY},
            "predicted_oom_pruned": sum(1 for t in pruned if t.error_class == "oom"),
        },
        "throughput_model": {
            "model_rel_sd": round(throughput.rel_sd, 4),
            "errors": error_summary(speed),
            "trials": speed[-SHOWN:],
            "replay": {"refits": speed_fits, "exact_first": EXACT_REPLAY},
        },
        "pruned": {
            "unsupported": sum(1 for t in pruned if t.error_class == "unsupported"),
            "oom": sum(1 for t in pruned if t.error_class == "oom"),
            "headroom": sum(1 for t in pruned if t.error_class == "headroom"),
        },
        "learned_rules": [r.describe() for r in learned.rules],
    }
