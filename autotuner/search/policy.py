"""The search policy: what the coordinator asks besides Optuna, so no GPU time is wasted.

`StudyRunner` (autotuner/coordinator.py) owns the state machine, the database and the sampler;
this class owns the judgement, one study at a time:

- **screen** a proposal before launch: built-in compatibility rules, the space's rules, rules
  learned from `unsupported` results, the OOM boundary (a micro-batch at or above one that ran
  out of memory, everything else equal), and the cost model's predicted OOM. A screened-out
  proposal is recorded as a pruned trial and told to the sampler as a violated constraint.
- **learn** from each finished trial: calibrate the cost model on measured peaks and OOMs,
  learn unsupported rules, track the best value and whether it still improves beyond noise.
- **seed** a new study: the expert default first (bf16, a fused attention kernel, compile
  default, the largest micro-batch the cost model says fits), then the winners of earlier
  completed studies on the same GPU and model family.
- **finish**: stop early once no trial has improved beyond noise for `patience` trials, then
  re-measure the top candidates in fresh processes, interleaved A B A B, before recommending.

Options: `autotuner.options.StudyOptions` (one typed model; its defaults live there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotuner.executors.base import Target
from autotuner.flops import flops_per_token, param_count
from autotuner.options import StudyOptions
from autotuner.search.costmodel import CostModel, error_summary, sequential_errors
from autotuner.search.objective import Objective, memory_violation, objective_value
from autotuner.search.rules import LearnedRules, incompatibility
from autotuner.search.sampler import Observation
from autotuner.search.seeding import Seeder
from autotuner.search.space import IntRange, SearchSpace
from autotuner.spec import (
    Checkpointing,
    FailureClass,
    Knobs,
    ModelSpec,
    TrialResult,
    TrialStatus,
    canonical_params,
)
from autotuner.storage.models import Trial, TrialState
from autotuner.storage.session import Database

# Prune on a predicted OOM only when even the prediction's optimistic end (mean - Z sd) is over
# the limit: a config pruned by mistake is lost to the search, one launched by mistake costs a
# short failed trial.
Z_PRUNE = 1.64
REMEASURE_SHARE = 5  # at most 1/5 of a trial budget goes to re-measurement
SEARCH_TIME_SHARE = 0.85  # with a time budget, the search stops here and re-measuring begins

# A pruned config that would run, but that another config beats for sure (error_class).
DOMINATED = "dominated"


@dataclass(frozen=True)
class Prune:
    """Why a proposal is not launched, and how the sampler is told."""

    error_class: str  # a FailureClass value (oom, unsupported) or "dominated"
    message: str
    violation: float
    result: TrialResult | None = None  # kept on the pruned row (a predicted OOM's numbers)


class SearchPolicy:
    def __init__(
        self,
        *,
        space: SearchSpace,
        model: ModelSpec,
        target: Target,
        gpus_per_trial: int,
        objective: Objective,
        options: StudyOptions,
    ) -> None:
        self.space, self.model, self.target = space, model, target
        self.gpus = gpus_per_trial
        self.objective = objective
        self.options = options
        self.use_rules = options.rules
        self.use_cost_model = options.cost_model
        self.use_expert_seed = options.expert_seed
        self.history_seeds = options.history_seeds
        self.remeasure_top = options.remeasure_top
        self.remeasure_rounds = options.remeasure_rounds
        self.patience = options.early_stop_patience
        self.on_cuda = target.device_type != "cpu"
        limits = [x for x in (space.measure.memory_limit_gib, target.memory_gib) if x]
        self.limit_gib = min(limits) if limits else None
        self.ceiling_gib = options.max_mem_gib
        self.cost = CostModel(
            model, num_gpus=max(gpus_per_trial, 1), on_cuda=self.on_cuda, limit_gib=self.limit_gib
        )
        self.learned = LearnedRules()
        self.ooms: list[tuple[dict[str, Any], int, int]] = []  # (other params, micro-batch, n)
        self.seed_keys: set[str] = set()
        # Progress of the search (search and seed trials, in order).
        self.best: float | None = None
        self.since_improvement = 0
        self.search_trials = 0
        self.spreads: list[float] = []
        # canonical params -> (params, best search value) of each feasible config
        self.values: dict[str, tuple[dict[str, Any], float]] = {}
        self.remeasured = 0

    # ------------------------------------------------------------------ screening

    def knobs(self, params: dict[str, Any]) -> Knobs:
        return self.space.knobs_for(params, self.model, self.gpus)

    def screen(self, params: dict[str, Any], knobs: Knobs) -> Prune | None:
        """Why not to launch this proposal, or None to launch it."""
        if self.use_rules:
            reason = incompatibility(knobs, self.target, self.model, self.gpus)
            if reason is None and (rule := self.space.violated_rule(knobs)) is not None:
                reason = rule.why
            if reason is not None:
                return Prune(FailureClass.UNSUPPORTED.value, reason, 1.0)
            if (learned := self.learned.violated_by(knobs)) is not None:
                return Prune(FailureClass.UNSUPPORTED.value, learned.describe(), 1.0)
        if not self.use_cost_model:
            return None
        if (oom := self._oom_boundary(params, knobs)) is not None:
            return oom
        if (oom := self._predicted_oom(knobs)) is not None:
            return oom
        return self._dominated(knobs)

    def _dominated(self, knobs: Knobs) -> Prune | None:
        # Checkpointing trades compute for memory: at the same micro-batch it is always slower,
        # so it is only worth measuring where less checkpointing would not fit.
        domain = self.space.knobs.get("checkpointing")
        if domain is None or isinstance(domain, IntRange):
            return None  # not searched: the user chose it
        order = [Checkpointing.NONE, Checkpointing.SELECTIVE, Checkpointing.FULL]
        level = order.index(knobs.checkpointing)
        for lighter in order[:level]:
            if not _in(domain, lighter.value):
                continue
            alt = knobs.model_copy(update={"checkpointing": lighter})
            if self.space.violated_rule(alt) is None and self.cost.predict(alt).surely_fits(
                Z_PRUNE
            ):
                return Prune(
                    DOMINATED,
                    f"dominated: checkpointing={knobs.checkpointing.value} only recomputes; "
                    f"checkpointing={lighter.value} fits at micro-batch "
                    f"{knobs.micro_batch_size} (cost model) and is faster",
                    0.01,
                )
        return None

    def _oom_boundary(self, params: dict[str, Any], knobs: Knobs) -> Prune | None:
        # Memory grows with the micro-batch, everything else equal: at or above a micro-batch
        # that ran out of memory is out of memory too.
        mb = knobs.micro_batch_size
        rest = {k: v for k, v in params.items() if k != "micro_batch_size"}
        for other, oom_mb, number in self.ooms:
            if other == rest and mb >= oom_mb:
                pred = self.cost.predict(knobs)
                return Prune(
                    FailureClass.OOM.value,
                    f"predicted out of memory: micro_batch_size {oom_mb} ran out of memory in "
                    f"trial {number} with the same other knobs; {mb} needs more",
                    max(pred.over_rel, 0.01),
                    self._predicted_result(pred, "boundary"),
                )
        return None

    def _predicted_oom(self, knobs: Knobs) -> Prune | None:
        pred = self.cost.predict(knobs)
        over_limit = pred.surely_over(Z_PRUNE)
        over_ceiling = False
        if self.ceiling_gib:
            low = pred.allocated_gib - Z_PRUNE * pred.sd_gib / self.cost.calibration.fragmentation
            over_ceiling = low > self.ceiling_gib
        if not (over_limit or over_ceiling):
            return None
        if over_limit or not self.ceiling_gib:
            what = f"the {pred.limit_gib:.1f} GiB limit"
            violation = pred.over_rel
        else:
            what = f"the {self.ceiling_gib:.1f} GiB ceiling (max_mem_gib)"
            violation = pred.allocated_gib / self.ceiling_gib - 1.0
        return Prune(
            FailureClass.OOM.value,
            f"predicted out of memory: needs {pred.need_gib:.1f} ± {pred.sd_gib:.1f} GiB, over "
            f"{what} (cost model calibrated on {self.cost.calibration.measured} measured trials)",
            max(violation, 0.01),
            self._predicted_result(pred, "cost model"),
        )

    def _predicted_result(self, pred: Any, source: str) -> TrialResult:
        return TrialResult.failure(
            FailureClass.OOM,
            f"predicted out of memory ({source}); not launched",
            required_mem_gib=round(pred.need_gib, 3),
            memory_limit_gib=pred.limit_gib,
            notes=["predicted", source],
        )

    # ------------------------------------------------------------------ learning

    def observe(
        self, number: int, params: dict[str, Any], result: TrialResult | None, purpose: str
    ) -> None:
        """Learn from a finished trial (live, or replayed from the database on restart)."""
        if result is None or "predicted" in result.notes:
            return
        knobs = self.knobs(params)
        self.cost.observe(knobs, result)
        fclass = result.failure_class
        if fclass == FailureClass.UNSUPPORTED:
            self.learned.learn(knobs, result.unsupported_knobs, number, result.error_message)
        if fclass == FailureClass.OOM:
            rest = {k: v for k, v in params.items() if k != "micro_batch_size"}
            self.ooms.append((rest, knobs.micro_batch_size, number))
        if purpose == "remeasure":
            self.remeasured += 1
            return
        if fclass is not None and not fclass.is_config_failure:
            return  # infra: says nothing about the config, and it is retried
        self.search_trials += 1
        value = self._value(result)
        if value is None:
            self.since_improvement += 1
            return
        key = canonical_params(params)
        self.values[key] = (params, max(value, self.values.get(key, (params, 0.0))[1]))
        if result.spread_rel is not None:
            self.spreads.append(result.spread_rel)
        if self.best is None or value > self.best * (1.0 + self.noise_rel()):
            self.since_improvement = 0
        else:
            self.since_improvement += 1
        self.best = max(self.best or 0.0, value)

    def observe_row(self, t: Trial) -> None:
        """`observe` for a trial row read back from the database."""
        if t.state == TrialState.PRUNED or not t.result:
            return
        result = TrialResult.model_validate(t.result)
        self.observe(t.number, t.params, result, t.purpose)

    def observation(self, t: Trial) -> Observation | None:
        """What the sampler is told about a recorded trial (rebuilding after a restart)."""
        state = TrialState(t.state)
        result = TrialResult.model_validate(t.result) if t.result else None
        if state == TrialState.COMPLETE:
            violation = self.violation(t.params, result) if result else 0.0
            return Observation(t.params, t.objective_value, violation)
        if state in (TrialState.INFEASIBLE, TrialState.PRUNED):
            violation = 1.0
            if result is not None and "predicted" in result.notes:
                limit = result.memory_limit_gib
                need = result.required_mem_gib
                violation = max(need / limit - 1.0, 0.01) if need and limit else 1.0
            elif result is not None:
                violation = self.violation(t.params, result)
            return Observation(t.params, 0.0, violation)
        if state in (TrialState.FAILED, TrialState.LOST):
            return Observation(t.params, None)
        return None

    def _value(self, result: TrialResult) -> float | None:
        if result.status != TrialStatus.OK or memory_violation(result, self.options) > 0:
            return None
        try:
            return objective_value(self.objective, result, self.gpus, self.options)
        except ValueError:
            return None

    def violation(self, params: dict[str, Any], result: TrialResult) -> float:
        """The constraint value told to the sampler for a finished trial (0: feasible)."""
        if result.status == TrialStatus.OK:
            return memory_violation(result, self.options)
        if result.failure_class == FailureClass.OOM:
            return self.cost.oom_violation(self.knobs(params), result)
        return 1.0

    def noise_rel(self) -> float:
        spreads = sorted(self.spreads)
        return max(spreads[len(spreads) // 2] if spreads else 0.0, 0.005)

    # ------------------------------------------------------------------ seeding

    def seeds(self, db: Database) -> list[dict[str, Any]]:
        """Params to enqueue first (autotuner/seeding.py): the expert default, earlier winners
        on this GPU and model family, then the expert's closest alternatives."""
        seeds = self._seeder().seeds(db)
        self.seed_keys = {canonical_params(p) for p in seeds}
        return seeds

    def expert_params(self) -> dict[str, Any]:
        return self._seeder().expert_params()

    def _seeder(self) -> Seeder:
        return Seeder(
            space=self.space,
            model=self.model,
            target=self.target,
            gpus=self.gpus,
            options=self.options,
            cost=self.cost,
            limit_gib=self.limit_gib,
            screen=self.screen,
        )

    def purpose(self, params: dict[str, Any]) -> str:
        return "seed" if canonical_params(params) in self.seed_keys else "search"

    # ------------------------------------------------------------------ finishing

    def remeasure_reserve(self, max_trials: int | None) -> int:
        """Trials of the budget kept for re-measuring the top candidates."""
        want = self.remeasure_top * self.remeasure_rounds
        if want <= 0 or self.remeasure_top < 1:
            return 0
        if max_trials is None:
            return want
        room = (max_trials // REMEASURE_SHARE) // self.remeasure_top * self.remeasure_top
        return max(0, min(want, room))

    def converged(self) -> bool:
        """No search trial improved the best beyond noise in the last `patience` trials."""
        if self.patience <= 0 or self.best is None:
            return False
        # A few trials beyond the patience, so the sampler's random start-up phase is over.
        started = self.search_trials >= self.patience + 4
        return started and self.since_improvement >= self.patience

    def search_over(
        self, launched: int, max_trials: int | None, elapsed_share: float | None
    ) -> bool:
        if self.converged():
            return True
        if max_trials is not None and launched >= max_trials - self.remeasure_reserve(max_trials):
            return True
        reserve_time = self.remeasure_reserve(None) > 0
        return elapsed_share is not None and reserve_time and elapsed_share >= SEARCH_TIME_SHARE

    def next_remeasure(self, max_trials: int | None) -> dict[str, Any] | None:
        """The next config to re-measure (A B A B ...), or None when done."""
        plan = self.remeasure_plan(max_trials)
        return plan[self.remeasured] if self.remeasured < len(plan) else None

    def remeasure_plan(self, max_trials: int | None) -> list[dict[str, Any]]:
        reserve = self.remeasure_reserve(max_trials)
        ranked = sorted(self.values.values(), key=lambda pv: pv[1], reverse=True)
        top = [params for params, _ in ranked[: self.remeasure_top]]
        if not top:
            return []
        rounds = max(1, reserve // len(top)) if reserve else 0
        return [p for _ in range(rounds) for p in top][:reserve]

    def stop_reason(self, budget_spent: bool) -> str:
        if self.converged():
            return (
                f"converged: no improvement beyond noise (±{self.noise_rel():.1%}) in the last "
                f"{self.since_improvement} trials"
            )
        return "budget spent" if budget_spent else "search space exhausted"

    def report(self, trials: list[Trial]) -> dict[str, Any]:
        """Evidence for the recommendation: cost-model accuracy, learned rules, pruning counts."""
        measured = []
        for t in sorted(trials, key=lambda t: t.number):
            if t.state == TrialState.PRUNED or not t.result:
                continue
            result = TrialResult.model_validate(t.result)
            measured.append((t.number, self.knobs(t.params), result))
        errors = sequential_errors(
            self.model,
            measured,
            num_gpus=max(self.gpus, 1),
            on_cuda=self.on_cuda,
            limit_gib=self.limit_gib,
        )
        pruned = [t for t in trials if t.state == TrialState.PRUNED]
        cal = self.cost.calibration
        return {
            "cost_model": {
                "param_count": param_count(self.model),
                "flops_per_token": flops_per_token(self.model),
                "memory_limit_gib": self.limit_gib,
                "calibration": {
                    "measured": cal.measured,
                    "fragmentation": round(cal.fragmentation, 3),
                    "model_rel_sd": round(cal.rel_sd, 4),
                },
                "errors": error_summary(errors),
                "trials": errors[-200:],
                "predicted_oom_pruned": sum(1 for t in pruned if t.error_class == "oom"),
            },
            "pruned": {
                "unsupported": sum(1 for t in pruned if t.error_class == "unsupported"),
                "oom": sum(1 for t in pruned if t.error_class == "oom"),
            },
            "learned_rules": [r.describe() for r in self.learned.rules],
        }


def _in(domain: list[Any] | IntRange, value: Any) -> bool:
    if isinstance(domain, IntRange):
        return isinstance(value, int) and domain.low <= value <= domain.high
    return str(getattr(value, "value", value)) in {str(getattr(d, "value", d)) for d in domain}
