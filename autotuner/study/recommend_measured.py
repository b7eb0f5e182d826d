"""What the recommendation computes over a study's trials that no memory headroom changes, and
the configs that fit at a given headroom, derived from it.

A re-judge (`best --headroom`) is the recommendation at another headroom, from the study's
measured trials. Most of its work does not depend on the headroom: reading every trial row,
keying each trial's config, grouping trials into configs, their medians, spreads and peaks, the
ranking by objective. `MeasuredConfigs` holds that work for one set of trials (cached per study
version by the re-judge: study/recommend_cache.py), so a re-judge at a new headroom only finds
the trials that are tight there and ranks the configs the rest make up.

`fitting(options)` is, group for group and in the same order, what `rank_groups` gives over
the trials `over_memory` keeps (tests compare the two): a config none of whose trials is tight
is the same object as in the full ranking; one with some trials tight is grouped again from
the rest and put where the stable sort would put it.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotuner.options import StudyOptions
from autotuner.purpose import END_CHECKS, Purpose
from autotuner.search import headroom
from autotuner.search.noise import noise_band
from autotuner.search.pareto import front_in_order
from autotuner.spec import canonical_params
from autotuner.storage.models import Trial, TrialState
from autotuner.study.batch import of_trial
from autotuner.study.columns import measured, memory_record
from autotuner.study.measurements import ConfigMeasurements, keyed_candidates, stopped_early


@dataclass(frozen=True)
class _Needs:
    """The measured trials on one memory limit that the headroom applies to (a GPU's memory):
    by what each needs, ascending, so the tight ones at a headroom are a tail of the list."""

    limit: float
    needs: list[float]
    trials: list[int]  # indices into MeasuredConfigs.keyed, in the order of `needs`


class MeasuredConfigs:
    """A study's measured trials keyed, grouped into configs and ranked, with each config's
    spreads and peak memory: everything of the recommendation that no headroom changes.
    Read-only once built (several requests may use one at a time)."""

    def __init__(self, trials: Sequence[Trial]) -> None:
        self.trials = trials
        # The knob report's evidence counts the trials that stopped early; candidates do not.
        self.evidence = keyed_candidates(trials, stopped_early_too=True)
        self.stopped = {id(t) for _, t in self.evidence if stopped_early(t)}
        self.keyed = [(key, t) for key, t in self.evidence if id(t) not in self.stopped]
        members: dict[str, list[int]] = {}
        for i, (key, _) in enumerate(self.keyed):
            members.setdefault(key, []).append(i)
        groups = [
            (ConfigMeasurements(key, [self.keyed[i][1] for i in idx]), idx)
            for key, idx in members.items()
        ]
        # rank_groups' order: by median, best first, a stable sort (the first trial's order
        # among equals), re-measured configs first where any is (where none is, every flag is
        # the same and the order is by median alone).
        groups.sort(key=lambda gi: (not gi[0].remeasured, -gi[0].median, gi[1][0]))
        self._groups = [g for g, _ in groups]
        self._members = [idx for _, idx in groups]
        self._sort_key = {id(g): (not g.remeasured, -g.median, idx[0]) for g, idx in groups}
        self._group_of = [0] * len(self.keyed)
        for pos, idx in enumerate(self._members):
            for i in idx:
                self._group_of[i] = pos
        self._position = {g.key: pos for pos, g in enumerate(self._groups)}
        self._within = {id(g): g.within_rel for g in self._groups}
        self._between = {id(g): g.between_rel for g in self._groups}
        self._peak = {id(g): _peak_median(g) for g in self._groups}
        self._peaks = [measured(t, "peak_mem_gib") or 0.0 for _, t in self.keyed]
        self._needs = _needs_by_limit(self.keyed)
        self._total = sum(len(idx) for idx in self._members)
        self._multi = [pos for pos, idx in enumerate(self._members) if len(idx) > 1]
        self._by_value = sorted(
            (t.objective_value or 0.0, i) for i, (_, t) in enumerate(self.keyed)
        )
        self._within_sorted = sorted(self._within.values())
        # The Pareto sweep's order (search/pareto.py: by peak, then value), ties by rank: the
        # order pareto_sweep puts the ranked configs' points in, so that a sweep over those
        # that fit keeps the points recommend.pareto keeps.
        self._by_peak = sorted(
            (pos for pos, g in enumerate(self._groups) if self._peak[id(g)] is not None),
            key=lambda pos: (self._peak[id(self._groups[pos])], -self._groups[pos].median, pos),
        )
        # The only rows the checks read (a headroom check's, a parity run's, a parity
        # reference's), and the configs they are of: no other config has a check.
        checks = (Purpose.HEADROOM, Purpose.PARITY, Purpose.PARITY_REFERENCE)
        self.check_rows = [t for t in trials if t.purpose in checks]
        self.check_keys = {canonical_params(t.params) for t in self.check_rows}
        self.expert_positions = [
            pos
            for pos, g in enumerate(self._groups)
            if any(t.purpose == Purpose.EXPERT_DEFAULT for t in g.trials)
        ]
        self.batch_rows = _batch_rows(trials)

    def tight(self, options: StudyOptions) -> set[int]:
        """The keyed trials `over_memory` keeps out at `options` (indices into `keyed`): over
        the max_mem_gib ceiling, or leaving less than the headroom free. As
        headroom.violation computes it: need / usable - 1 > 0 where the headroom applies."""
        out: set[int] = set()
        ceiling = options.max_mem_gib
        if ceiling is not None:
            out.update(i for i, peak in enumerate(self._peaks) if peak > ceiling)
        if options.headroom > 0:
            for needs in self._needs:
                usable = headroom.usable_gib(needs.limit, options.headroom)
                if not usable:
                    continue
                # need / usable - 1 rises with need: the tight ones are the tail from here.
                first = bisect.bisect_left(needs.needs, True, key=_over(usable))
                out.update(needs.trials[first:])
        return out

    def keyed_above(self, value: float) -> list[tuple[str, Trial]]:
        """The keyed trials of every config with a measurement above `value`, in `keyed`'s
        order (the configs that can have a median above it)."""
        above = bisect.bisect_right(self._by_value, (value, len(self.keyed)))
        keys = {self.keyed[i][0] for _, i in self._by_value[above:]}
        rows = sorted(i for key in keys for i in self._members[self._position[key]])
        return [self.keyed[i] for i in rows]

    def fitting(self, options: StudyOptions) -> Fitting:
        """rank_groups over the keyed trials that are not tight at `options`."""
        tight = self.tight(options)
        touched = {self._group_of[i] for i in tight}
        if touched:
            kept = [g for pos, g in enumerate(self._groups) if pos not in touched]
        else:
            kept = list(self._groups)
        changed = []
        extra: dict[int, tuple[bool, float, int]] = {}

        def key_of(g: ConfigMeasurements) -> tuple[bool, float, int]:
            return self._sort_key.get(id(g)) or extra[id(g)]

        for pos in sorted(touched):
            rest = [i for i in self._members[pos] if i not in tight]
            if not rest:
                continue
            g = ConfigMeasurements(self._groups[pos].key, [self.keyed[i][1] for i in rest])
            key = (not g.remeasured, -g.median, rest[0])
            extra[id(g)] = key
            kept.insert(bisect.bisect_right(kept, key, key=key_of), g)
            changed.append(g)
        return Fitting(self, kept, touched, changed)


class Fitting:
    """The configs that fit at a headroom (`ranked`, as rank_groups gives them), and what the
    recommendation computes over all of them, from what MeasuredConfigs kept: `touched` are
    the positions (in its ranking) of configs with a tight trial, `changed` those of them
    grouped again from their other trials."""

    def __init__(
        self,
        configs: MeasuredConfigs,
        ranked: list[ConfigMeasurements],
        touched: set[int],
        changed: list[ConfigMeasurements],
    ) -> None:
        self.configs, self.ranked, self.touched, self.changed = configs, ranked, touched, changed

    def _gone(self) -> list[ConfigMeasurements]:
        return [self.configs._groups[pos] for pos in self.touched]

    def has(self, key: str) -> bool:
        """Whether the config `key` is among `ranked`."""
        pos = self.configs._position.get(key)
        if pos is None:
            return False
        return pos not in self.touched or any(g.key == key for g in self.changed)

    def completed_trials(self) -> int:
        """sum(len(g.trials) for g in ranked)."""
        gone = sum(len(g.trials) for g in self._gone())
        return self.configs._total - gone + sum(len(g.trials) for g in self.changed)

    def noise_rel(self) -> float:
        """measurements.study_noise_rel(ranked), each config's spreads computed once."""
        kept = self.configs
        within = kept._within_sorted
        if self.touched:
            within = list(within)
            for g in self._gone():
                del within[bisect.bisect_left(within, kept._within[id(g)])]
            for g in self.changed:
                bisect.insort(within, g.within_rel)
        between = [
            kept._between[id(kept._groups[pos])] for pos in kept._multi if pos not in self.touched
        ]
        between += [g.between_rel for g in self.changed if len(g.trials) > 1]
        return noise_band(
            statistics.median(within) if within else 0.0, max(between) if between else 0.0
        )

    def pareto_front(
        self, failed: set[str]
    ) -> list[tuple[ConfigMeasurements, float, float]] | None:
        """recommend.pareto's front over the ranked configs not `failed`, by the kept order;
        None where a config was grouped again (its place among equal points is its rank's:
        the caller sweeps those itself)."""
        if self.changed:
            return None
        kept = self.configs
        order = (
            kept._groups[pos]
            for pos in kept._by_peak
            if pos not in self.touched and kept._groups[pos].key not in failed
        )
        return [(g, g.median, self._peak(g)) for g in front_in_order(order, _median)]

    def _peak(self, g: ConfigMeasurements) -> float:
        peak = self.configs._peak[id(g)]
        assert peak is not None  # _by_peak holds the configs with a peak only
        return peak

    def peak_median(self, g: ConfigMeasurements) -> float | None:
        """The median peak memory of a config's measurements (None: none measured)."""
        kept = self.configs._peak
        return kept[id(g)] if id(g) in kept else _peak_median(g)

    def with_checks(self, groups: Sequence[ConfigMeasurements]) -> list[ConfigMeasurements]:
        """The configs of `groups` that have a check row (the only ones a check is of)."""
        keys = self.configs.check_keys
        return [g for g in groups if g.key in keys] if keys else []

    def expert_default(self) -> ConfigMeasurements | None:
        """recommend._expert_default(ranked): the first ranked config with the expert seed."""
        kept = self.configs
        found = [kept._groups[pos] for pos in kept.expert_positions if pos not in self.touched]
        found += [
            g for g in self.changed if any(t.purpose == Purpose.EXPERT_DEFAULT for t in g.trials)
        ]
        if not found:
            return None
        ids = {id(g) for g in found}
        return next(g for g in self.ranked if id(g) in ids)


def _over(usable: float) -> Callable[[float], bool]:
    """headroom.violation(...) > 0 for a need on `usable` GiB."""
    return lambda need: headroom.over_usable(need, usable) > 0.0


def _median(g: ConfigMeasurements) -> float:
    return g.median


def _peak_median(g: ConfigMeasurements) -> float | None:
    mems = g.peak_mems
    return statistics.median(mems) if mems else None


def _needs_by_limit(keyed: Sequence[tuple[str, Trial]]) -> list[_Needs]:
    """The trials the headroom applies to (headroom.enforced: a GPU's memory with a known
    limit, a need measured), per limit, by need."""
    found: dict[float, list[tuple[float, int]]] = {}
    for i, (_, t) in enumerate(keyed):
        record = memory_record(t)
        if record is None or not headroom.on_gpu_memory(record):
            continue
        need, limit = headroom.need_gib(record), record.memory_limit_gib
        if need is not None and limit:  # a limit: on_gpu_memory checked it
            found.setdefault(limit, []).append((need, i))
    out = []
    for limit, pairs in found.items():
        pairs.sort()
        out.append(_Needs(limit, [n for n, _ in pairs], [i for _, i in pairs]))
    return out


def _batch_rows(trials: Sequence[Trial]) -> list[Trial]:
    """What batch.global_batch_entry reads of the trials, fewer: of the measured ones, the
    first of each global batch and every expert default (it reads their set of sizes and the
    first expert default)."""
    seen: set[int | None] = set()
    out = []
    for t in trials:
        if t.state != TrialState.COMPLETE or t.purpose in END_CHECKS:
            continue
        size = of_trial(t)
        if size not in seen or t.purpose == Purpose.EXPERT_DEFAULT:
            seen.add(size)
            out.append(t)
    return out
