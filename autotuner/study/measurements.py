"""A study's measured configs: its feasible trials grouped by config (`ConfigMeasurements`: the
pooled median of every fresh-process measurement, the spreads inside and between them), ranked
best first, and the study's noise band over them (search/noise.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from autotuner.options import StudyOptions
from autotuner.purpose import END_CHECKS, Purpose
from autotuner.search import headroom
from autotuner.search.noise import noise_band
from autotuner.spec import TrialResult, canonical_params, spread_rel
from autotuner.storage.models import Trial, TrialState
from autotuner.study.columns import load_json, measured, memory_record

_REPEATS = ("tokens_per_s", "tokens_per_s_min", "tokens_per_s_max")
T = TypeVar("T")


class cached_property(Generic[T]):
    """functools.cached_property without its lock (Python 3.11 takes one per read of an
    uncached value: a third of ranking 50,000 configs' medians). A value is computed from
    trials that no longer change, so two threads computing it at once store the same."""

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func, self.name = func, func.__name__

    def __get__(self, obj: Any, owner: Any = None) -> T:
        value = obj.__dict__[self.name] = self.func(obj)  # read from the instance from now on
        return value


def stopped_early(t: Trial) -> bool:
    """Whether a trial stopped after its first repeat(s) (search/early_stop.py): its column
    (migration 0005), else its loaded result's flag (a row built in memory, not stored yet)."""
    return bool(measured(t, "stopped_early"))


@dataclass
class ConfigMeasurements:
    """Every measurement of one config (its search trial and its re-measurements)."""

    key: str
    trials: list[Trial] = field(default_factory=list)

    @cached_property
    def results(self) -> list[TrialResult]:
        """The stored results, validated: read for the few configs the recommendation
        describes (the winner's JSON in one statement), never for every candidate."""
        load_json(self.trials, ("result",))
        return [TrialResult.model_validate(t.result) for t in self.trials]

    @property
    def peak_mems(self) -> list[float]:
        return [m for t in self.trials if (m := measured(t, "peak_mem_gib")) is not None]

    # Cached: ranking a big study reads them tens of thousands of times. The trials are all
    # added before either is read (group_measurements).
    @cached_property
    def values(self) -> list[float]:
        return [t.objective_value or 0.0 for t in self.trials]

    @cached_property
    def median(self) -> float:
        return float(statistics.median(self.values))

    @property
    def first(self) -> Trial:
        return self.trials[0]

    @property
    def remeasured(self) -> bool:
        return any(t.purpose == Purpose.REMEASURE for t in self.trials)

    @property
    def within_rel(self) -> float:
        """Median half-range of the repeats inside each measurement, relative."""
        spreads = [
            spread
            for t in self.trials
            if (spread := spread_rel(*(measured(t, name) for name in _REPEATS))) is not None
        ]
        return float(statistics.median(spreads)) if spreads else 0.0

    @property
    def between_rel(self) -> float:
        """Half-range of the measurements' medians across fresh processes, relative."""
        vals = self.values
        if len(vals) < 2 or not self.median:
            return 0.0
        return (max(vals) - min(vals)) / 2 / self.median

    @property
    def noise_rel(self) -> float:
        return noise_band(self.within_rel, self.between_rel)


def group_measurements(
    trials: Sequence[Trial], options: StudyOptions | None = None
) -> list[ConfigMeasurements]:
    """Feasible measured configs, best pooled median first."""
    keyed = keyed_candidates(trials)
    if options is not None:
        keyed = [(key, t) for key, t in keyed if not over_memory(t, options)]
    return rank_groups(keyed)


def keyed_candidates(
    trials: Sequence[Trial], *, stopped_early_too: bool = False
) -> list[tuple[str, Trial]]:
    """The measured search trials, with their configs' keys, in one pass; `stopped_early_too`:
    with the trials that stopped after a repeat below the floor (the knob report's evidence:
    their tokens/s is real, only never a candidate's)."""
    out = []
    for t in trials:
        if t.state != TrialState.COMPLETE or not t.objective_value:
            continue
        if measured(t, "tokens_per_s") is None:  # complete without a result: nothing measured
            continue
        if t.purpose in END_CHECKS:
            continue  # one GPU (the scaling reference) or a parity run: not a candidate
        if not stopped_early_too and stopped_early(t):
            continue  # its first repeat ran below the floor: not a full measurement
        out.append((canonical_params(t.params), t))
    return out


def rank_groups(keyed: Sequence[tuple[str, Trial]]) -> list[ConfigMeasurements]:
    groups: dict[str, ConfigMeasurements] = {}
    for key, t in keyed:
        groups.setdefault(key, ConfigMeasurements(key)).trials.append(t)
    return rank_configs(groups.values())


def rank_configs(groups: Iterable[ConfigMeasurements]) -> list[ConfigMeasurements]:
    """The configs best pooled median first (a stable sort: among equals, in the order
    given, which rank_groups gives as each config's first trial)."""
    ranked = sorted(groups, key=lambda g: g.median, reverse=True)
    # Re-measured candidates were the search's top ones; a single unrepeated measurement must
    # not beat them on luck alone, so they rank first.
    if any(g.remeasured for g in ranked):
        ranked.sort(key=lambda g: not g.remeasured)
    return ranked


def over_memory(t: Trial, options: StudyOptions) -> bool:
    """objective.memory_violation > 0, from the trial's memory columns: over the max_mem_gib
    ceiling, or less than the memory headroom free (search/headroom.py)."""
    ceiling = options.max_mem_gib
    if ceiling is not None and (measured(t, "peak_mem_gib") or 0.0) > ceiling:
        return True
    record = memory_record(t)
    return record is not None and headroom.violation(record, options) > 0


def study_noise_rel(groups: Sequence[ConfigMeasurements]) -> float:
    """The study's noise band: median repeat spread, or the fresh-process spread if larger."""
    within = [g.within_rel for g in groups if g.trials]
    between = [g.between_rel for g in groups if len(g.trials) > 1]
    return noise_band(
        statistics.median(within) if within else 0.0, max(between) if between else 0.0
    )


def min_of(values: Any) -> float | None:
    vals = [v for v in values if v is not None]
    return min(vals) if vals else None


def max_of(values: Any) -> float | None:
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def median_of(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None
