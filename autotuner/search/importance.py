"""Which knobs mattered, and which did not (within noise), for the recommendation.

Two views per knob, both honest about noise:

- **Effect**: the best objective reached with each value of the knob, and the ratio between the
  best and the worst of those (`effect_rel`). It reads as "the best config we found with the
  worst setting of this knob is this much slower than the best overall". When that ratio is
  smaller than the measurement noise (`noise_rel`: repeat spread, and the spread between fresh
  processes where the top candidates were re-measured), the knob *does not matter within noise*
  and the recommendation says so plainly. Under-explored values look worse than they are, so
  this errs toward "matters", never toward a false "does not matter".
- **Importance**: Optuna's PED-ANOVA (`optuna.importance.PedAnovaImportanceEvaluator`; fANOVA
  would need scikit-learn, which the control plane does not ship), computed on the feasible
  configs, with a permutation baseline: the same (unnormalised) importance on the objective
  values shuffled across configs, N times. A knob whose importance is not above the
  baseline's 90th percentile (`above_baseline` false) is indistinguishable from shuffled data
  by this measure. With the few dozen configs a study measures, and a sampler that
  concentrates them near the optimum, this test is weak; the verdict therefore rests on the
  effect, and the importance is reported beside it.

A knob whose values moved only together with another knob's (every config with one value of
it had one value of the other, and the other way round) has no effect of its own to report:
its verdict is `confounded`, naming the knob it moved with. A knob that changes only memory
(`allocator`) is `memory only`: no config runs under both of its values. A 10-minute Llama 3B
study measures two configs, the expert default and the fp8 seed, which differ in precision and (on
Hopper) attention kernel: the 32.8% between them was reported as what each knob alone is
worth.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

from autotuner.numbers import number

PERMUTATIONS = 10
# Knobs that change what memory is reserved, not the speed. The screen never runs a config under
# both values (search/screen.py: allocator twins), so the values' bests are other configs' bests:
# their ratio is no effect of the knob's.
# Each with where the screen lets its other value run.
MEMORY_ONLY_KNOBS = {
    "allocator": "a config runs with expandable segments only where the default may break the "
    "memory headroom",
}
MIN_CONFIGS_FOR_IMPORTANCE = 6
MAX_CONFIGS_FOR_IMPORTANCE = 500  # a random sample of them past this (bounds the cost)


def knob_report(
    configs: Sequence[tuple[dict[str, Any], float]],
    noise_rel: float,
    *,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per knob, most important first: effect, importance, baseline and a verdict.

    `configs`: (params, objective value) of each distinct feasible config (repeats pooled).
    """
    if not configs:
        return []
    knobs = sorted({k for params, _ in configs for k in params})
    best = max(v for _, v in configs)
    raw, baseline = _importances(configs, knobs, seed)
    total = sum(raw.values())
    importance = {k: round(v / total, 4) for k, v in raw.items()} if total > 0 else {}
    rows = []
    moved_with = _moved_with(configs, knobs)
    for knob in knobs:
        levels: dict[str, float] = {}
        for params, value in configs:
            if knob in params:
                level = str(params[knob])
                levels[level] = max(levels.get(level, 0.0), value)
        row: dict[str, Any] = {
            "knob": knob,
            "levels": {k: round(v, 6) for k, v in sorted(levels.items(), key=lambda kv: -kv[1])},
            "importance": importance.get(knob),  # share of the summed PED-ANOVA importance
            "importance_raw": raw.get(knob),
            "baseline_raw": baseline.get(knob),
            "above_baseline": (
                raw[knob] > baseline[knob] if knob in raw and knob in baseline else None
            ),
            "noise_rel": round(noise_rel, 4),
        }
        if len(levels) < 2:
            row.update(effect_rel=None, verdict="not explored")
            row["text"] = f"not explored: only {next(iter(levels), '-')} was measured"
        elif knob in MEMORY_ONLY_KNOBS:
            row.update(effect_rel=None, verdict="memory only")
            shown = ", ".join(f"{level} {number(value)}" for level, value in row["levels"].items())
            row["text"] = (
                f"memory only: it changes what is reserved, not the speed; "
                f"{MEMORY_ONLY_KNOBS[knob]}, so each value's best is another config's (best with "
                f"{shown})"
            )
        else:
            top = max(levels, key=lambda k: levels[k])
            worst = min(levels, key=lambda k: levels[k])
            effect = levels[top] / levels[worst] - 1.0 if levels[worst] > 0 else float("inf")
            row["effect_rel"] = round(effect, 4)
            row["best_level"], row["worst_level"] = top, worst
            partners = moved_with[knob]
            if effect <= noise_rel:
                row["verdict"] = "within noise"
                row["text"] = (
                    f"does not matter (within noise): the best with any value is within "
                    f"{effect:.1%}, noise ±{noise_rel:.1%}"
                )
            elif partners:
                row["verdict"] = "confounded"
                row["confounded_with"] = partners
                row["text"] = (
                    f"not separable: it changed only together with {' and '.join(partners)}; "
                    f"together, best with {top} is {effect:.1%} above best with {worst} "
                    f"(noise ±{noise_rel:.1%})"
                )
            else:
                row["verdict"] = "matters"
                row["text"] = (
                    f"matters: best with {top} is {effect:.1%} above best with {worst} "
                    f"(noise ±{noise_rel:.1%}; best overall {number(best)})"
                )
        rows.append(row)
    order = {"matters": 0, "confounded": 1, "memory only": 2, "within noise": 3, "not explored": 4}
    rows.sort(key=lambda r: (order[r["verdict"]], -(r["effect_rel"] or 0.0)))
    return rows


def _moved_with(
    configs: Sequence[tuple[dict[str, Any], float]], knobs: list[str]
) -> dict[str, list[str]]:
    """For each knob, the other knobs whose values are one-to-one with its own over the configs
    that set both (each value of one always came with the same value of the other). The
    relation is symmetric: each pair is looked at once."""
    out: dict[str, list[str]] = {k: [] for k in knobs}
    for i, knob in enumerate(knobs):
        for other in knobs[i + 1 :]:
            pairs = {(str(p[knob]), str(p[other])) for p, _ in configs if knob in p and other in p}
            ours, theirs = {a for a, _ in pairs}, {b for _, b in pairs}
            if len(ours) > 1 and len(pairs) == len(ours) == len(theirs):
                out[knob].append(other)
                out[other].append(knob)
    return out


def _importances(
    configs: Sequence[tuple[dict[str, Any], float]], knobs: list[str], seed: int
) -> tuple[dict[str, float], dict[str, float]]:
    varied = [k for k in knobs if len({str(p.get(k)) for p, _ in configs}) > 1]
    usable = [(p, v) for p, v in configs if all(k in p for k in varied)]
    if len(varied) < 1 or len(usable) < MIN_CONFIGS_FOR_IMPORTANCE:
        return {}, {}
    if len(usable) > MAX_CONFIGS_FOR_IMPORTANCE:
        # Each PED-ANOVA run builds an Optuna study of every config, 1 + PERMUTATIONS times:
        # 40 s at 8,000 configs. A fixed random sample bounds it; the effect uses them all.
        picked = np.random.default_rng(seed).choice(
            len(usable), MAX_CONFIGS_FOR_IMPORTANCE, replace=False
        )
        usable = [usable[i] for i in sorted(picked)]
    dists: dict[str, BaseDistribution] = {
        k: _SharedChoices(sorted({str(p[k]) for p, _ in usable})) for k in varied
    }
    params = [{k: str(p[k]) for k in varied} for p, _ in usable]
    values = np.array([v for _, v in usable])
    study = _study(params, dists)
    observed = _ped_anova(study, values)
    rng = np.random.default_rng(seed)
    shuffled: dict[str, list[float]] = {k: [] for k in varied}
    for _ in range(PERMUTATIONS):
        for k, v in _ped_anova(study, rng.permutation(values)).items():
            shuffled[k].append(v)
    baseline = {k: round(float(np.percentile(v, 90)), 6) for k, v in shuffled.items() if v}
    return {k: round(v, 6) for k, v in observed.items()}, baseline


class _SharedChoices(CategoricalDistribution):
    """A knob's choices, one object shared by every trial of the report's study: a deep copy
    (Optuna copies each trial it adds) is the object itself, its hash computed once. PED-ANOVA
    groups each run's trials by their distribution; comparing 500 equal copies choice by
    choice, then hashing each, for every knob of 11 runs was half the knob report's time.
    The choices never change, so sharing them changes nothing else."""

    __slots__ = ("_hash",)  # kept out of __dict__, which equality and Optuna's JSON read

    def __init__(self, choices: Sequence[str]) -> None:
        super().__init__(choices)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or super().__eq__(other)

    def __deepcopy__(self, memo: dict[int, Any]) -> _SharedChoices:
        return self


def _study(params: list[dict[str, str]], dists: dict[str, BaseDistribution]) -> optuna.Study:
    """The configs as one Optuna study, built once: each PED-ANOVA run (the observed values,
    then each permutation) reads its values through `target` (building a study per run took
    seconds at 500 configs). The trials' own values are unused."""
    study = optuna.create_study(direction="minimize")
    study.add_trials(
        [optuna.trial.create_trial(params=p, distributions=dists, value=0.0) for p in params]
    )
    return study


def _ped_anova(study: optuna.Study, values: np.ndarray) -> dict[str, float]:
    """PED-ANOVA importances of reaching high `values` (one per trial of `study`, in order)."""
    n = len(values)
    # PED-ANOVA compares the top quantile with the rest; with few trials a 10% quantile holds
    # one or two configs, so use a quarter (at least two configs).
    quantile = min(max(0.25, 2.0 / n), 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return dict(
                get_param_importances(
                    study,
                    evaluator=PedAnovaImportanceEvaluator(target_quantile=quantile),
                    normalize=False,
                    # PED-ANOVA takes low targets as good: the values negated, maximised.
                    target=lambda t: -float(values[t.number]),
                )
            )
        except (RuntimeError, ValueError):
            return {}
