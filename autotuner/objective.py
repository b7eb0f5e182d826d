"""What a study maximises, computed from a measured result.

Every objective is expressed so that larger is better (Optuna direction "maximize"), which keeps
infeasible trials simple: they are told as 0.0 with a violated constraint.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from autotuner.spec import TrialResult


class Objective(StrEnum):
    TOKENS_PER_S = "tokens_per_s"  # whole-trial throughput (default)
    TOKENS_PER_S_PER_GPU = "tokens_per_s_per_gpu"  # efficiency when trials differ in GPU count
    MTOKENS_PER_USD = (
        "mtokens_per_usd"  # million tokens per dollar (needs options.usd_per_gpu_hour)
    )

    def describe(self) -> str:
        return {
            Objective.TOKENS_PER_S: "tokens/s",
            Objective.TOKENS_PER_S_PER_GPU: "tokens/s per GPU",
            Objective.MTOKENS_PER_USD: "million tokens per $",
        }[self]


def objective_value(
    objective: Objective, result: TrialResult, num_gpus: int, options: dict[str, Any]
) -> float:
    """The number the search maximises for one ok result."""
    assert result.tokens_per_s is not None
    if objective == Objective.TOKENS_PER_S:
        return result.tokens_per_s
    if objective == Objective.TOKENS_PER_S_PER_GPU:
        return result.tokens_per_s_per_gpu or result.tokens_per_s / max(num_gpus, 1)
    price = options.get("usd_per_gpu_hour")
    if not price:
        raise ValueError("objective mtokens_per_usd needs options.usd_per_gpu_hour (a price > 0)")
    usd_per_s = float(price) * max(num_gpus, 1) / 3600.0
    return result.tokens_per_s / 1e6 / usd_per_s
