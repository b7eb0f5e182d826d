"""The next micro-batch up, wherever a measured peak leaves room for it.

The expert default's micro-batch is the largest the memory model is sure fits before anything
ran: the prior's pessimistic end (search/seeding.py), which has to be wide because a component
may be off by a third before the study measures it (costmodel/calibration.py). A measured
trial then shows how much room there really is: an expert default that leaves 46% of the
memory free, as a Hugging Face model's did on an H100, leaves its next micro-batch (9% faster
there) untried unless the search goes by the measurement. A seed planned from the prior before
any trial cannot: it would be the expert's config only (not the seed that leads), and queued
behind the throughput model it comes too late for a timed study.

So the room is judged on what was measured. After a search trial finishes, its config's next
micro-batch up (the next size of the space that runs the study's held global batch) is a
candidate when the trial's measured need (headroom.need_gib: the reserved peak and the CUDA
context, the largest of its measurements) plus the calibrated memory model's predicted increase
stays inside the usable memory (the limit less the headroom) at Z_ROOM standard deviations of
that increase. The increase is the difference of the two configs' estimates under the study's
calibrated multipliers: the activations and the loss path grow with the micro-batch, the
weights, gradients and optimizer state do not (and with one accumulation step fewer, the
gradients kept across micro-steps may go), so only the components that change carry doubt.

The candidate of the best measured config (or of any within the study's noise of it: the
order between them is not known) is proposed before the throughput model and the sampler, once
the seeds that run up front have run (search/seeding.py SeedPlan.now; study/proposals.py asks
in that order): a larger micro-batch of the config that leads is where the speed of a
well-chosen config most often still is, and it costs no new kind of compile. Not of configs
below the best: a micro-batch doubling gained 3-9% on the compiled Llama configs of the H200
landscapes, so it rarely lifts a config that trails into the lead, and every config with room
would otherwise climb a micro-batch ladder before the search could propose anything else. The
proposal is still screened (rules, learned rules, the OOM boundary) and held to the time budget
like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autotuner.search.costmodel import CostModel
from autotuner.search.domains import sorted_sizes
from autotuner.search.headroom import need_gib, usable_gib
from autotuner.search.space import SearchSpace
from autotuner.spec import Knobs, ModelSpec, TrialResult, TrialStatus, canonical_params
from autotuner.types import Params

# The increase's pessimistic end that must fit: as sure as the expert default's micro-batch
# (seeding.Z_SEED), here about the difference alone (the measured peak carries no model doubt).
Z_ROOM = 1.0


@dataclass
class _Measured:
    params: Params  # the space's knobs of the config
    knobs: Knobs
    need_gib: float  # the largest measured need of the config


@dataclass(frozen=True)
class Room:
    """A config's next micro-batch up, and the memory it is expected to need."""

    params: Params
    need_gib: float  # measured need + the predicted increase
    sd_gib: float  # of the increase
    usable_gib: float

    @property
    def fits(self) -> bool:
        return self.need_gib + Z_ROOM * self.sd_gib <= self.usable_gib


class MicroBatchUp:
    """The next-micro-batch-up candidates of one study (see the module docstring)."""

    def __init__(
        self,
        *,
        space: SearchSpace,
        model: ModelSpec,
        gpus: int,
        cost: CostModel,
        limit_gib: float | None,
        headroom: float,
    ) -> None:
        self.space, self.model, self.gpus, self.cost = space, model, gpus, cost
        # No memory to fill (a CPU without a cap): nothing says a larger micro-batch has room.
        usable = usable_gib(limit_gib, headroom if cost.on_cuda else 0.0)
        self.usable_gib = usable if "micro_batch_size" in space.knobs else None
        self._measured: dict[str, _Measured] = {}

    def observe(self, params: Params, knobs: Knobs, result: TrialResult) -> None:
        """A finished search trial of this config (its params in the space)."""
        if self.usable_gib is None or result.status != TrialStatus.OK:
            return
        need = need_gib(result)
        if need is None:
            return
        searched = {k: params[k] for k in self.space.knobs if k in params}
        key = canonical_params(searched)
        known = self._measured.get(key)
        if known is None or need > known.need_gib:
            self._measured[key] = _Measured(searched, knobs, need)

    def room(self, params: Params) -> Room | None:
        """The measured config's next micro-batch up with its expected need; None where the
        config was not measured, or is at the largest micro-batch that runs the held global
        batch."""
        if self.usable_gib is None:
            return None
        known = self._measured.get(canonical_params(params))
        if known is None:
            return None
        up = self._next_up(known)
        if up is None:
            return None
        params_up, knobs_up = up
        start = self.cost.estimate(known.knobs)
        more = self.cost.calibration.predict_increase(start, self.cost.estimate(knobs_up))
        # Where the config measured more than the calibrated model predicts, the excess is
        # put on what grows with the micro-batch (the pessimistic reading), and the increase
        # grows with it: a model still near its prior may say little about the activations.
        predicted = self.cost.calibration.predict(start, None).need_gib
        excess = known.need_gib - predicted
        scale = 1.0 + excess / more.grows_gib if excess > 0 and more.grows_gib > 0 else 1.0
        return Room(
            params_up,
            known.need_gib + more.mean_gib * scale,
            more.sd_gib * scale,
            self.usable_gib,
        )

    def next(
        self,
        *,
        exclude: set[str],
        leaders: list[Params],
        screen: Callable[[Params, Knobs], object | None],
    ) -> Params | None:
        """The next micro-batch up of the first of `leaders` (the best measured configs, best
        first) that has room for it, is not in `exclude` (measured, pruned, failed, running or
        left out for time) and passes `screen`, or the config the screen names to run in its
        place (`instead`, as the coordinator runs a pruned seed's twin); None when none does."""
        for params in leaders:
            room = self.room(params)
            if room is None or not room.fits:
                continue
            if canonical_params(room.params) in exclude:
                continue
            knobs = self.space.knobs_for(room.params, self.model, self.gpus)
            prune = screen(room.params, knobs)
            if prune is None:
                return dict(room.params)
            instead = getattr(prune, "instead", None)
            if instead is not None and canonical_params(instead) not in exclude:
                return dict(instead)
        return None

    def _next_up(self, known: _Measured) -> tuple[Params, Knobs] | None:
        """The next larger micro-batch of the space that runs the held global batch with this
        config's other knobs, with its knobs (the accumulation follows)."""
        mb = known.params.get("micro_batch_size", known.knobs.micro_batch_size)
        for size in sorted_sizes(self.space):
            if size <= mb:
                continue
            params = {**known.params, "micro_batch_size": size}
            try:
                knobs = self.space.knobs_for(params, self.model, self.gpus)
            except ValueError:  # an invalid combination (the knob validators say why)
                continue
            if self.space.global_batch_mismatch(knobs, self.model, self.gpus) is None:
                return params, knobs
        return None


def leaders(values: dict[str, tuple[dict[str, Any], float]], noise_rel: float) -> list[Params]:
    """The measured configs within the noise of the best (progress.Progress.values), best
    first: which of them leads is not known."""
    if not values:
        return []
    best = max(v for _, v in values.values())
    close = [(p, v) for p, v in values.values() if v >= best * (1.0 - noise_rel)]
    return [p for p, _ in sorted(close, key=lambda pv: -pv[1])]
