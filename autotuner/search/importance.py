"""Which knobs mattered, and which did not (within noise), for the recommendation.

One measure per knob, read straight off the measurements and honest about noise:

- **Effect**: the best objective reached with each value of the knob, and the ratio between the
  best and the worst of those (`effect_rel`). It reads as "the best config we found with the
  worst setting of this knob is this much slower than the best overall". When that ratio is
  smaller than the measurement noise (`noise_rel`: repeat spread, and the spread between fresh
  processes where the top candidates were re-measured), the knob *does not matter within noise*
  and the recommendation says so plainly. Under-explored values look worse than they are, so
  this errs toward "matters", never toward a false "does not matter".
- **Importance**: each knob's share of the effects beyond noise, on a log scale
  (`log(1 + effect) - log(1 + noise)`, at least 0, over the knobs that matter): a knob worth
  4.5x outranks one worth 19%, as their effects say, and a knob within noise has none. Ratios
  multiply, so their logs add: two knobs worth 2x each weigh as much as one worth 4x.

Why not Optuna's importance evaluators: PED-ANOVA (what this reported before) answers "which
knob's values tell the top quarter of the configs the search tried from the rest", which
depends on where the sampler went more than on what the knob does. A guided search spends most
trials at large micro-batches, so the top quarter and the rest share their micro-batches, and
a knob the sampler varies everywhere (the optimizer) separates them: on such a study it ranked
the optimizer (19% effect) at 0.69 and the micro-batch (4.5x) at 0.30
(`tests/search/test_importance.py`). fANOVA on log-throughput would weigh effects, but needs
scikit-learn, which the control plane does not ship, and a random forest fitted to the few
dozen configs a study measures extrapolates into the values the sampler skipped.

A knob whose values moved only together with another knob's (every config with one value of
it had one value of the other, and the other way round) has no effect of its own to report:
its verdict is `confounded`, naming the knob it moved with, and no importance. A knob that
changes only memory (`allocator`) is `memory only`: no config runs under both of its values. A
10-minute Llama 3B study measures two configs, the expert default and the fp8 seed, which
differ in precision and (on Hopper) attention kernel: the 32.8% between them was reported as
what each knob alone is worth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from autotuner.numbers import number

# Knobs that change what memory is reserved, not the speed. The screen never runs a config under
# both values (search/screen.py: allocator twins), so the values' bests are other configs' bests:
# their ratio is no effect of the knob's.
# Each with where the screen lets its other value run.
MEMORY_ONLY_KNOBS = {
    "allocator": "a config runs with expandable segments only where the default may break the "
    "memory headroom",
}
ORDER = {"matters": 0, "confounded": 1, "memory only": 2, "within noise": 3, "not explored": 4}


def knob_report(
    configs: Sequence[tuple[dict[str, Any], float]], noise_rel: float
) -> list[dict[str, Any]]:
    """One row per knob, most important first: each value's best, the effect, its importance
    and a verdict.

    `configs`: (params, objective value) of each distinct feasible config (repeats pooled).
    """
    if not configs:
        return []
    best = max(v for _, v in configs)
    rows = []
    by_knob = _levels(configs)
    knobs = sorted(by_knob)
    moved_with = _moved_with(configs, knobs)
    for knob in knobs:
        levels = by_knob[knob]
        row: dict[str, Any] = {
            "knob": knob,
            "levels": {k: round(v, 6) for k, v in sorted(levels.items(), key=lambda kv: -kv[1])},
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
    _importance(rows, noise_rel)
    rows.sort(key=lambda r: (ORDER[r["verdict"]], -(r["effect_rel"] or 0.0)))
    return rows


def _levels(configs: Sequence[tuple[dict[str, Any], float]]) -> dict[str, dict[str, float]]:
    """Each knob's best value per level (its value as text), the levels in the order the
    configs first show them. One pass over the configs, not one per knob (50,000 configs of
    ten knobs at the end of a study)."""
    out: dict[str, dict[str, float]] = {}
    for params, value in configs:
        for knob, raw in params.items():
            levels = out.get(knob)
            if levels is None:
                levels = out[knob] = {}
            level = str(raw)
            levels[level] = max(levels.get(level, 0.0), value)
    return out


def _importance(rows: list[dict[str, Any]], noise_rel: float) -> None:
    """Each row's `importance`: its share of the summed log effects beyond noise, among the
    knobs with an effect of their own (`matters`, `within noise`: 0); None for the others
    (not explored, memory only, confounded: no effect that is the knob's alone)."""
    floor = math.log1p(max(noise_rel, 0.0))
    beyond = {}
    for row in rows:
        if row["verdict"] in ("matters", "within noise"):
            effect = row["effect_rel"]
            beyond[row["knob"]] = (
                max(0.0, math.log1p(effect) - floor) if math.isfinite(effect) else math.inf
            )
    total = sum(beyond.values())
    for row in rows:
        share = beyond.get(row["knob"])
        if share is None:
            row["importance"] = None
        elif math.isinf(total):  # a value that measured nothing beside one that did
            row["importance"] = 1.0 if math.isinf(share) else 0.0
        else:
            row["importance"] = round(share / total, 4) if total > 0 else 0.0


def _moved_with(
    configs: Sequence[tuple[dict[str, Any], float]], knobs: list[str]
) -> dict[str, list[str]]:
    """For each knob, the other knobs whose values are one-to-one with its own over the configs
    that set both (each value of one always came with the same value of the other). The
    relation is symmetric: each pair is looked at once."""
    out: dict[str, list[str]] = {k: [] for k in knobs}
    for i, knob in enumerate(knobs):
        for other in knobs[i + 1 :]:
            if _one_to_one(configs, knob, other):
                out[knob].append(other)
                out[other].append(knob)
    return out


def _one_to_one(configs: Sequence[tuple[dict[str, Any], float]], knob: str, other: str) -> bool:
    """Whether each value of `knob` came with one value of `other` and the other way round,
    over more than one value. Read until a value comes with a second one: two knobs searched
    independently show it within a few configs (building every pair of 50,000 configs for
    each of 45 knob pairs took 2 s at the end of a study)."""
    ours: dict[str, str] = {}
    theirs: dict[str, str] = {}
    for p, _ in configs:
        if knob in p and other in p:
            a, b = str(p[knob]), str(p[other])
            if ours.setdefault(a, b) != b or theirs.setdefault(b, a) != a:
                return False
    return len(ours) > 1
