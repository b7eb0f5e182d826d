"""Model-guided proposals: the config to run next, by expected improvement per GPU-second.

Optuna's TPE learns only from what the study measured, knob by knob, so on a big model (where
every trial costs minutes) it needs many trials to find a config its space holds. The
throughput model (`costmodel/throughput.py`) knows the physics: it predicts every config's
tokens/s with an uncertainty, fitted to the study's own trials. This module scores candidates by

    expected improvement over the best measured tokens/s      (normal predictive, closed form)
    x probability the config fits the usable memory           (the calibrated memory model)
    / the trial's expected GPU-seconds                        (search/trial_cost.py)

and proposes the best one that passes the policy's screen. Nothing is pruned here: the
candidates it does not pick stay for Optuna's sampler, which proposes whenever this module has
nothing worth a trial (no incumbent yet, or every expected improvement below `MIN_GAIN`).

Several GPUs run several trials at once, so a proposal is often made while others run
(`pending`). Those are excluded like measured ones, and their *kind* (micro-batch, precision,
compile mode and scope: what decides a trial's speed and compile) is avoided where a
candidate of another kind scores at least `SIMILAR_SCORE` of the best: the best candidate
is usually a one-knob neighbour of the one just launched, and a second trial of that kind
teaches the model little before the first reports (the batch stays informative, as Optuna's
constant liar keeps TPE's). Where nothing of another kind comes close, the best runs.

Candidates are the whole space when it is small (`MAX_ENUMERATED`), else a fixed random sample
of it plus every one-knob neighbour of the incumbent; a caller may supply its own pool (the
replay benchmark: only the recorded configs exist).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotuner.search.costmodel import CostModel
from autotuner.search.costmodel.throughput import ThroughputModel
from autotuner.search.headroom import usable_gib
from autotuner.search.space import IntRange, SearchSpace
from autotuner.search.trial_cost import TrialCosts
from autotuner.spec import Knobs, ModelSpec, canonical_params
from autotuner.types import Params

MAX_ENUMERATED = 6000
SAMPLED = 3000
MIN_GAIN = 0.003  # expected improvement below 0.3% of the incumbent: not worth a trial
MAX_SCREENED = 200  # candidates checked against the screen per proposal, best first
# While trials run, a candidate of a kind none of them is may replace the best one when it
# scores at least this share of it: within 2x, the expected-improvement-per-second estimate
# does not tell the two apart as well as a result of a new kind teaches the model.
SIMILAR_SCORE = 0.5


@dataclass
class _Candidate:
    params: Params
    knobs: Knobs
    features: np.ndarray
    memory: np.ndarray


class Proposer:
    """Proposes by expected improvement per GPU-second (see the module docstring)."""

    def __init__(
        self,
        *,
        space: SearchSpace,
        model: ModelSpec,
        gpus: int,
        throughput: ThroughputModel,
        memory: CostModel,
        screen: Callable[[Params, Knobs], object | None],
        costs: TrialCosts,
        headroom: float = 0.0,
        seed: int = 0,
        candidates: Callable[[], list[Params]] | None = None,
    ) -> None:
        self.space, self.model, self.gpus = space, model, gpus
        self.headroom = headroom  # the share of the memory limit a recommendation keeps free
        self.throughput, self.memory, self.screen = throughput, memory, screen
        self.costs = costs
        self._rng = random.Random(seed)
        self._supplied = candidates
        self._pool: dict[str, _Candidate] = {}
        self._pool_ready = False

    def suggest(
        self,
        *,
        exclude: set[str],
        incumbent: Params | None,
        best_tokens_per_s: float | None,
        pending: Sequence[Params] = (),
    ) -> Params | None:
        """The candidate worth most per GPU-second, or None to leave the choice to the sampler.
        `pending`: the configs running now (see the module docstring)."""
        if not best_tokens_per_s or self.throughput.measured == 0:
            return None
        self._fill(incumbent)
        keys = [k for k in self._pool if k not in exclude]
        if not keys:
            return None
        cands = [self._pool[k] for k in keys]
        mean, sd = self.throughput.predict_many(np.array([c.features for c in cands]))
        gain = _expected_improvement(mean, sd, best_tokens_per_s)
        seconds = np.array([self.costs.expected_s(c.knobs) for c in cands])
        score = gain * self._fit_probability(cands) / seconds
        busy = self._kinds(pending)
        best: int | None = None  # the best candidate that passes the screen
        for i in np.argsort(-score)[:MAX_SCREENED]:
            if gain[i] < MIN_GAIN * best_tokens_per_s:
                break
            if best is not None and score[i] < SIMILAR_SCORE * score[best]:
                break  # nothing of another kind comes close: the best runs
            if self.screen(cands[i].params, cands[i].knobs) is not None:
                continue
            if batch_kind(cands[i].knobs) not in busy:
                return dict(cands[i].params)
            best = i if best is None else best
        return None if best is None else dict(cands[best].params)

    def _kinds(self, pending: Sequence[Params]) -> set[tuple[Any, ...]]:
        kinds = set()
        for params in pending:
            try:
                kinds.add(batch_kind(self.space.knobs_for(params, self.model, self.gpus)))
            except ValueError:  # not a config of this space (an end check's): no kind to avoid
                continue
        return kinds

    # ------------------------------------------------------------------ candidates

    def _fill(self, incumbent: Params | None) -> None:
        if not self._pool_ready:
            self._pool_ready = True
            for params in self._initial():
                self._add(params)
        if incumbent is not None and self._supplied is None:
            for params in self._neighbours(incumbent):
                self._add(params)

    def _initial(self) -> list[Params]:
        if self._supplied is not None:
            return self._supplied()
        domains = {k: _values(d) for k, d in self.space.knobs.items()}
        size = math.prod(len(v) for v in domains.values())
        if size <= MAX_ENUMERATED:
            combos = itertools.product(*domains.values())
            return [dict(zip(domains, combo, strict=True)) for combo in combos]
        return [{k: self._rng.choice(v) for k, v in domains.items()} for _ in range(SAMPLED)]

    def _neighbours(self, params: Params) -> list[Params]:
        out = []
        for knob, domain in self.space.knobs.items():
            for value in _values(domain):
                if knob in params and value != params[knob]:
                    out.append({**params, knob: value})
        return out

    def _add(self, params: Params) -> None:
        key = canonical_params(params)
        if key in self._pool:
            return
        try:
            knobs = self.space.knobs_for(params, self.model, self.gpus)
        except ValueError:  # an invalid combination of values (the knob validators say why)
            return
        self._pool[key] = _Candidate(
            params,
            knobs,
            self.throughput.features(knobs),
            self.memory.estimate(knobs).vector(),
        )

    def headroom_chance(self, params: Params) -> float | None:
        """The probability these params keep the memory headroom, as the proposer weighs
        them (None: no valid config)."""
        self._add(params)
        cand = self._pool.get(canonical_params(params))
        return None if cand is None else float(self._fit_probability([cand])[0])

    def _fit_probability(self, cands: list[_Candidate]) -> np.ndarray:
        """The probability each candidate keeps the memory headroom: its improvement is worth
        nothing otherwise, as a tight config is never recommended. Against the whole limit, a
        Qwen2.5-1.5B tune on the H100 ran micro-batch 8 under CUDA graphs predicted at
        78.4 +- 5.0 GiB of 79.2 (a 56% chance to fit, 8% to keep 10% free), and it ran out of
        memory (bench/results/hf_tune_h100_qwen2.5)."""
        limit = usable_gib(self.memory.limit_gib, self.headroom)
        if not limit:
            return np.ones(len(cands))
        need, sd = self.memory.calibration.predict_many(
            np.array([c.memory for c in cands]), [c.knobs.allocator for c in cands]
        )
        z = (limit - need) / np.maximum(sd, 1e-9)
        return 0.5 * (1.0 + _erf(z / math.sqrt(2.0)))


def batch_kind(knobs: Knobs) -> tuple[Any, ...]:
    """What two trials running at once should differ in to teach the model apart: the
    micro-batch, the precision and the compile (mode and scope)."""
    return (
        knobs.micro_batch_size,
        knobs.precision.value,
        knobs.compile_mode.value,
        knobs.compile_scope.value,
    )


def _values(domain: Any) -> list[Any]:
    if isinstance(domain, IntRange):
        if domain.log:
            out, v = [], domain.low
            while v <= domain.high:
                out.append(v)
                v *= 2
            return out
        return list(range(domain.low, domain.high + 1, domain.step))
    return [getattr(v, "value", v) for v in domain]


def _expected_improvement(mean: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    sd = np.maximum(sd, 1e-9)
    z = (mean - best) / sd
    cdf = 0.5 * (1.0 + _erf(z / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * z**2) / math.sqrt(2.0 * math.pi)
    return (mean - best) * cdf + sd * pdf


_erf = np.vectorize(math.erf, otypes=[float])
