"""Screening a proposal before launch: the reasons not to spend a GPU on it.

In order: the built-in compatibility rules, the space's rules, rules learned from `unsupported`
results, the OOM boundary (a micro-batch at or above one that ran out of memory, everything
else equal), the cost model's predicted OOM, a predicted break of the memory headroom
(headroom.py), dominated checkpointing, and an allocator twin (the same config under the other
CUDA allocator mode, which changes only memory). A screened-out proposal is recorded as a
pruned trial and told to the sampler as a violated constraint.

The screen keeps what finished trials taught it (learned rules, the OOM boundary); the cost
model it asks is the study's, calibrated by the policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotuner.search.context import SearchContext
from autotuner.search.costmodel import Prediction
from autotuner.search.headroom import usable_gib, violation
from autotuner.search.rules import LearnedRules, incompatibility
from autotuner.search.space import IntRange
from autotuner.spec import (
    Checkpointing,
    FailureClass,
    Knobs,
    TrialResult,
    TrialStatus,
    canonical_params,
)

# Prune on a predicted OOM only when even the prediction's optimistic end (mean - Z sd) is over
# the limit: a config pruned by mistake is lost to the search, one launched by mistake costs a
# short failed trial.
Z_PRUNE = 1.64

# A pruned config that would run, but that another config beats for sure (error_class).
DOMINATED = "dominated"
# A pruned config that would run, but would leave less than the memory headroom free.
HEADROOM = "headroom"


@dataclass(frozen=True)
class Prune:
    """Why a proposal is not launched, and how the sampler is told."""

    error_class: str  # a FailureClass value (oom, unsupported), "dominated" or "headroom"
    message: str
    violation: float
    result: TrialResult | None = None  # kept on the pruned row (a predicted OOM's numbers)
    instead: dict[str, Any] | None = None  # params to run in its place (an allocator twin)


class Screen:
    """The reasons not to launch a proposal, for one study."""

    def __init__(self, context: SearchContext) -> None:
        space, model, target, gpus = context.space, context.model, context.target, context.gpus
        options, cost = context.options, context.cost
        self.space, self.model, self.target, self.gpus = space, model, target, gpus
        self.use_rules = options.rules
        self.use_cost_model = options.cost_model
        self.ceiling_gib = options.max_mem_gib
        self.headroom = options.headroom if cost.on_cuda else 0.0  # GPU memory only
        self.cost = cost
        self.learned = LearnedRules()
        self.ooms: list[tuple[dict[str, Any], int, int]] = []  # (other params, micro-batch, n)
        self.options = options
        # The other knobs' key -> {allocator mode: (trial number, kept the headroom)}
        self.allocator_runs: dict[str, dict[str, tuple[int, bool]]] = {}

    def check(self, params: dict[str, Any], knobs: Knobs) -> Prune | None:
        """Why not to launch this proposal, or None to launch it."""
        # Not an ablation switch: a different global batch is a different training run.
        if (why := self.space.global_batch_mismatch(knobs, self.model, self.gpus)) is not None:
            return Prune(FailureClass.UNSUPPORTED.value, why, 1.0)
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
        if (tight := self._predicted_tight(knobs)) is not None:
            return tight
        return self._dominated(knobs) or self._allocator_twin(params, knobs)

    def learn(self, number: int, params: dict[str, Any], knobs: Knobs, result: TrialResult) -> None:
        """Remember what a finished trial rules out: an unsupported combination, an OOM."""
        fclass = result.failure_class
        self.learned.observe(knobs, ran=result.status == TrialStatus.OK)
        if fclass == FailureClass.UNSUPPORTED:
            self.learned.learn(knobs, result.unsupported_knobs, number, result.error_message)
        if fclass == FailureClass.COMPILE_ERROR:
            self.learned.learn_repeated(knobs, number, result.error_message)
        if fclass == FailureClass.OOM:
            rest = {k: v for k, v in params.items() if k != "micro_batch_size"}
            self.ooms.append((rest, knobs.micro_batch_size, number))
        if result.status == TrialStatus.OK or fclass == FailureClass.OOM:
            kept = result.status == TrialStatus.OK and violation(result, self.options) <= 0
            runs = self.allocator_runs.setdefault(_without_allocator(params), {})
            runs[knobs.allocator] = (number, kept)

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
            # Fits with the headroom kept: a lighter level that would be tight is no winner.
            usable = usable_gib(self.cost.limit_gib, self.headroom)
            if self.space.violated_rule(alt) is None and self.cost.predict(alt, usable).surely_fits(
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

    def _allocator_twin(self, params: dict[str, Any], knobs: Knobs) -> Prune | None:
        # The allocator's mode changes what is reserved, not what runs: twins differing only in
        # it run at one speed (a GPT-2 replay with the knob measured 10 such pairs in 20
        # trials). Expandable segments are worth a trial only where the default allocator may
        # break the headroom; the default allocator never once its expandable twin has run.
        domain = self.space.knobs.get("allocator")
        if domain is None or isinstance(domain, IntRange) or len(domain) < 2:
            return None
        runs = self.allocator_runs.get(_without_allocator(params), {})
        if knobs.allocator == "default" and "expandable" in runs:
            return Prune(
                DOMINATED,
                "dominated: allocator=default reserves more at the same speed; this config "
                f"ran with allocator=expandable (trial #{runs['expandable'][0]})",
                0.01,
            )
        if knobs.allocator != "expandable":
            return None
        instead = None
        if "default" in runs:
            number, kept = runs["default"]
            if not kept:
                return None  # the default allocator broke the headroom: expandable may not
            why = f"with the default allocator (trial #{number}) it kept the headroom"
        else:
            instead = {**params, "allocator": "default"}
            default = knobs.model_copy(update={"allocator": "default"})
            usable = usable_gib(self.cost.limit_gib, self.headroom)
            pred = self.cost.predict(default, usable)
            if usable is None or not pred.surely_fits(Z_PRUNE):
                return None
            why = (
                f"with the default allocator it keeps the headroom (cost model: "
                f"{pred.need_gib:.1f} ± {pred.sd_gib:.1f} GiB of {usable:.1f} usable)"
            )
        return Prune(
            DOMINATED,
            f"dominated: allocator=expandable changes only what is reserved, at the same "
            f"speed; {why}",
            0.01,
            instead=instead,
        )

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
                    _predicted_result(pred, "boundary"),
                )
        return None

    def _predicted_oom(self, knobs: Knobs) -> Prune | None:
        pred = self.cost.predict(knobs)
        over_limit = pred.surely_over(Z_PRUNE)
        over_ceiling = False
        if self.ceiling_gib:
            low = pred.allocated_gib - Z_PRUNE * pred.sd_gib / pred.fragmentation
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
            f"{what} (cost model calibrated on {self.cost.calibrated_on()})",
            max(violation, 0.01),
            _predicted_result(pred, "cost model"),
        )

    def _predicted_tight(self, knobs: Knobs) -> Prune | None:
        # As for an OOM, only the confidently tight: a config that would just break the
        # headroom is still worth measuring (its measured peak decides, search/headroom.py).
        pred = self.cost.predict(knobs)
        usable = usable_gib(pred.limit_gib, self.headroom)
        if not self.headroom or usable is None or pred.need_gib - Z_PRUNE * pred.sd_gib <= usable:
            return None
        assert pred.limit_gib is not None
        return Prune(
            HEADROOM,
            f"predicted to break the {self.headroom:.0%} memory headroom: needs "
            f"{pred.need_gib:.1f} ± {pred.sd_gib:.1f} GiB, over {usable:.1f} GiB "
            f"({1 - self.headroom:.0%} of the {pred.limit_gib:.1f} GiB limit; cost model "
            f"calibrated on {self.cost.calibrated_on()})",
            max(pred.need_gib / usable - 1.0, 0.01),
            _predicted_result(pred, "cost model, headroom"),
        )


def _without_allocator(params: dict[str, Any]) -> str:
    return canonical_params({k: v for k, v in params.items() if k != "allocator"})


def _predicted_result(pred: Prediction, source: str) -> TrialResult:
    return TrialResult.failure(
        FailureClass.OOM,
        f"predicted out of memory ({source}); not launched",
        required_mem_gib=round(pred.need_gib, 3),
        memory_limit_gib=pred.limit_gib,
        notes=["predicted", source],
    )


def _in(domain: list[Any] | IntRange, value: Any) -> bool:
    if isinstance(domain, IntRange):
        return isinstance(value, int) and domain.low <= value <= domain.high
    return str(getattr(value, "value", value)) in {str(getattr(d, "value", d)) for d in domain}
