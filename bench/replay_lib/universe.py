"""The landscape as the universe a strategy searches: space, model, recorded configs, snapping.

A recorded landscape need not be a full grid (bench/gpu_validation.py records sweeps around a
base config). Its configs are then the universe: each proposal, the seeds included, becomes the
nearest recorded config not yet measured (`Snapper`, `UniverseSampler`).
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

import optuna

from autotuner.executors.replay import Landscape, with_later_knobs
from autotuner.presets import MODEL_PRESETS
from autotuner.search.sampler import distributions
from autotuner.search.space import IntRange, SearchSpace, parse_space
from autotuner.spec import (
    Knobs,
    ModelSpec,
    TrialResult,
    canonical_params,
)

# --------------------------------------------------------------------------- set-up


def auto_space(landscape: Landscape) -> SearchSpace:
    """The knobs that vary in the landscape (their recorded values); the rest fixed."""
    names = set(Knobs.knob_names())
    knobs, fixed = {}, {}
    for name, values in landscape.values().items():
        if name not in names:
            continue
        if len(values) > 1:
            knobs[name] = sorted(values) if all(isinstance(v, int) for v in values) else values
        else:
            fixed[name] = values[0]
    if not knobs:
        raise SystemExit(
            f"{len(landscape.entries)} recorded config(s), no knob varies: nothing to search"
        )
    return parse_space(
        {
            "name": "replay-auto",
            "description": "the landscape's varying knobs",
            "knobs": knobs,
            "fixed": fixed,
        },
        source="landscape",
    )


def landscape_model(landscape: Landscape, model: str | None) -> ModelSpec:
    name = model or landscape.meta.get("model")
    if name is None:
        name = next((p.get("model") for p, _ in landscape.entries if p.get("model")), None)
    if isinstance(name, dict):
        return ModelSpec.resolve(name)
    if name is not None and name.endswith((".yaml", ".yml", ".json")):
        from autotuner.inputs import load_model_spec  # a model spec file (an `hf` config's)

        return load_model_spec(name)
    if name not in MODEL_PRESETS:
        raise SystemExit(
            f"the landscape does not name a model preset ({name!r}); pass --model PRESET or "
            "--model SPEC.yaml"
        )
    return ModelSpec.resolve({"preset": name})


def universe(landscape: Landscape, space: SearchSpace) -> dict[str, TrialResult]:
    """The recorded configs inside the space (its fixed values matched), by searched params."""
    out: dict[str, TrialResult] = {}
    for recorded, result in landscape.entries:
        params = with_later_knobs(recorded, [*space.knobs, *space.fixed])
        if any(str(params.get(k, v)) != str(v) for k, v in space.fixed.items()):
            continue
        if not all(k in params and _in(space.knobs[k], params[k]) for k in space.knobs):
            continue
        out.setdefault(canonical_params({k: params[k] for k in space.knobs}), result)
    return out


def _in(domain: Any, value: Any) -> bool:
    if isinstance(domain, IntRange):
        return isinstance(value, int) and domain.low <= value <= domain.high
    return str(value) in {str(getattr(d, "value", d)) for d in domain}


def grid_size(space: SearchSpace) -> int:
    return math.prod(
        (len(d) if isinstance(d, list) else (d.high - d.low) // d.step + 1)
        for d in space.knobs.values()
    )


# --------------------------------------------------------------------------- sparse recordings


class Snapper:
    """Maps a config to the nearest recorded one: categorical knobs count 1 per difference,
    numeric knobs |log2 a - log2 b| (micro-batch 64 vs 128 counts like one categorical).

    Ties (many, with categorical knobs) go by a random order of the recorded configs drawn
    from `seed`, one per run: by the landscape's own order they went to its first entry, which
    on the Llama 1B landscape with its best dropped was the new best, so random search "found"
    it in a median of 2 trials where 2 of 17 configs were within 2%."""

    def __init__(self, table: dict[str, TrialResult], space: SearchSpace, seed: int = 0) -> None:
        self.names = list(space.knobs)
        self.recorded = [json.loads(k) for k in table]
        self.keys = set(table)
        self.dists = distributions(space)
        self.rng = random.Random(seed)
        order = list(table)
        self.rng.shuffle(order)
        self._tie_rank = {key: i for i, key in enumerate(order)}

    def distance(self, a: dict[str, Any], b: dict[str, Any]) -> float:
        d = 0.0
        for n in self.names:
            x, y = a.get(n), b.get(n)
            if (
                isinstance(x, int | float)
                and isinstance(y, int | float)
                and not isinstance(x, bool)
            ):
                d += abs(math.log2(max(x, 1)) - math.log2(max(y, 1)))
            else:
                d += str(x) != str(y)
        return d

    def nearest(self, params: dict[str, Any], exclude: set[str] | frozenset[str] = frozenset()):
        if canonical_params({n: params.get(n) for n in self.names}) in self.keys:
            return params
        pool = self.unmeasured(exclude)
        return min(
            pool, key=lambda c: (self.distance(c, params), self._tie_rank[canonical_params(c)])
        )

    def unmeasured(self, exclude: set[str] | frozenset[str]) -> list[dict[str, Any]]:
        """The recorded configs not in `exclude` (all of them once every one is)."""
        return [c for c in self.recorded if canonical_params(c) not in exclude] or self.recorded

    def many(self, configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for c in configs:
            snapped = self.nearest(c, {canonical_params(o) for o in out})
            if snapped not in out:
                out.append(snapped)
        return out


class UniverseSampler(optuna.samplers.BaseSampler):
    """Wraps a sampler so each proposal is a recorded config: the inner sampler proposes in the
    space, and an unrecorded proposal becomes the nearest recorded config not yet measured.

    Random search is uniform over the recorded configs not yet measured (`uniform`): what
    random search over a fixed set is. Snapping a random point of the space instead favours
    the configs with the largest share of the space nearest to them, whatever their speed."""

    def __init__(
        self, inner: optuna.samplers.BaseSampler, snap: Snapper, *, uniform: bool = False
    ) -> None:
        self.inner, self.snap, self.uniform = inner, snap, uniform

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {}  # everything goes through sample_independent -> one snapped config per trial

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> dict[str, Any]:
        return {}

    def before_trial(self, study: Any, trial: Any) -> None:
        self.inner.before_trial(study, trial)
        self._proposal: dict[str, Any] | None = None
        self._trial_id = trial._trial_id

    def sample_independent(self, study: Any, trial: Any, name: str, dist: Any) -> Any:
        if self._proposal is None or self._trial_id != trial._trial_id:
            self._proposal = self._propose(study, trial)
        return self._proposal[name]

    def _propose(self, study: Any, trial: Any) -> dict[str, Any]:
        if self.uniform:
            return self.snap.rng.choice(self.snap.unmeasured(_measured(study)))
        dists = self.snap.dists
        rel_space = self.inner.infer_relative_search_space(study, trial)
        proposal = dict(self.inner.sample_relative(study, trial, rel_space)) if rel_space else {}
        for name, dist in dists.items():
            if name not in proposal:
                proposal[name] = self.inner.sample_independent(study, trial, name, dist)
        return self.snap.nearest(proposal, _measured(study))

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self.inner.after_trial(study, trial, state, values)


def _measured(study: Any) -> set[str]:
    return {
        canonical_params(t.params)
        for t in study.get_trials(deepcopy=False)
        if t.state.is_finished() and t.params
    }
