"""What the sampler is told about a finished trial: its value and how infeasible it was.

Optuna learns from the constraint value (`sampler.py`): 0 for a feasible trial, and for an
infeasible one how far over it was, so the sampler tells "just out of memory" from "far out".
A measured peak over the max_mem_gib ceiling is over by that much; an OOM by its need (or the
cost model's prediction, if larger), a predicted OOM by its predicted need; any other config
failure (unsupported, ruled out) by a flat 1. An infra failure is told as FAIL: no value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotuner.options import StudyOptions
from autotuner.purpose import END_CHECKS
from autotuner.search.costmodel import CostModel
from autotuner.search.objective import memory_violation
from autotuner.search.sampler import Observation
from autotuner.spec import FailureClass, Knobs, TrialResult, TrialStatus
from autotuner.storage.models import Trial, TrialState


class Feedback:
    """The study's constraint values and observations for the sampler."""

    def __init__(
        self,
        *,
        cost: CostModel,
        options: StudyOptions,
        knobs: Callable[[dict[str, Any]], Knobs],
    ) -> None:
        self.cost, self.options, self.knobs = cost, options, knobs

    def violation(
        self, params: dict[str, Any], result: TrialResult, knobs: Knobs | None = None
    ) -> float:
        """The constraint value told to the sampler for a finished trial (0: feasible)."""
        if result.status == TrialStatus.OK:
            return memory_violation(result, self.options)
        if result.failure_class == FailureClass.OOM:
            return self.cost.oom_violation(knobs or self.knobs(params), result)
        return 1.0

    def observation(self, t: Trial) -> Observation | None:
        """What the sampler is told about a recorded trial (rebuilding after a restart)."""
        if t.purpose in END_CHECKS:
            # A one-GPU run of a multi-GPU study's best, or a parity run: not a point of its space
            return None
        state = TrialState(t.state)
        result = TrialResult.model_validate(t.result) if t.result else None
        if state == TrialState.COMPLETE:
            violation = self.violation(t.params, result, t.knobs) if result else 0.0
            return Observation(t.params, t.objective_value, violation)
        if state in (TrialState.INFEASIBLE, TrialState.PRUNED):
            violation = 1.0
            if result is not None and "predicted" in result.notes:
                limit = result.memory_limit_gib
                need = result.required_mem_gib
                violation = max(need / limit - 1.0, 0.01) if need and limit else 1.0
            elif result is not None:
                violation = self.violation(t.params, result, t.knobs)
            return Observation(t.params, 0.0, violation)
        if state in (TrialState.FAILED, TrialState.LOST):
            return Observation(t.params, None)
        return None
