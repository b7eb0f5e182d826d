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
from collections.abc import Sequence
from dataclasses import dataclass

from autotuner.options import StudyOptions
from autotuner.search import headroom
from autotuner.search.noise import noise_band
from autotuner.storage.models import Trial
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
        # rank_groups' order: by median, best first, a stable sort (first trial's order among
        # equals); the re-measured ones are put first per headroom (they may lose trials).
        groups.sort(key=lambda gi: -gi[0].median)
        self._groups = [g for g, _ in groups]
        self._members = [idx for _, idx in groups]
        self._order = [(-g.median, idx[0]) for g, idx in groups]
        self._group_of = [0] * len(self.keyed)
        for pos, idx in enumerate(self._members):
            for i in idx:
                self._group_of[i] = pos
        self._within = {id(g): g.within_rel for g in self._groups}
        self._between = {id(g): g.between_rel for g in self._groups}
        self._remeasured = {id(g): g.remeasured for g in self._groups}
        self._peak = {id(g): _peak_median(g) for g in self._groups}
        self._peaks = [measured(t, "peak_mem_gib") or 0.0 for _, t in self.keyed]
        self._needs = _needs_by_limit(self.keyed)

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
                first = bisect.bisect_left(
                    needs.needs, True, key=lambda need, u=usable: need / u - 1.0 > 0.0
                )
                out.update(needs.trials[first:])
        return out

    def fitting(self, options: StudyOptions) -> list[ConfigMeasurements]:
        """rank_groups over the keyed trials that are not tight at `options`."""
        tight = self.tight(options)
        touched = {self._group_of[i] for i in tight}
        kept = [g for pos, g in enumerate(self._groups) if pos not in touched]
        order = [o for pos, o in enumerate(self._order) if pos not in touched]
        for pos in sorted(touched):
            rest = [i for i in self._members[pos] if i not in tight]
            if not rest:
                continue
            g = ConfigMeasurements(self._groups[pos].key, [self.keyed[i][1] for i in rest])
            where = bisect.bisect_right(order, (-g.median, rest[0]))
            order.insert(where, (-g.median, rest[0]))
            kept.insert(where, g)
        if any(self.remeasured(g) for g in kept):
            kept = [g for g in kept if self.remeasured(g)] + [
                g for g in kept if not self.remeasured(g)
            ]
        return kept

    def remeasured(self, g: ConfigMeasurements) -> bool:
        flag = self._remeasured.get(id(g))
        return g.remeasured if flag is None else flag

    def peak_median(self, g: ConfigMeasurements) -> float | None:
        """The median peak memory of a config's measurements (None: none measured)."""
        return self._peak[id(g)] if id(g) in self._peak else _peak_median(g)

    def noise_rel(self, groups: Sequence[ConfigMeasurements]) -> float:
        """measurements.study_noise_rel over `groups`, with each config's spreads computed
        once."""
        within = [
            w if (w := self._within.get(id(g))) is not None else g.within_rel
            for g in groups
            if g.trials
        ]
        between = [
            b if (b := self._between.get(id(g))) is not None else g.between_rel
            for g in groups
            if len(g.trials) > 1
        ]
        return noise_band(
            statistics.median(within) if within else 0.0, max(between) if between else 0.0
        )


def _peak_median(g: ConfigMeasurements) -> float | None:
    mems = g.peak_mems
    return statistics.median(mems) if mems else None


def _needs_by_limit(keyed: Sequence[tuple[str, Trial]]) -> list[_Needs]:
    """The trials the headroom applies to (headroom.enforced: a GPU's memory with a known
    limit, a need measured), per limit, by need."""
    found: dict[float, list[tuple[float, int]]] = {}
    for i, (_, t) in enumerate(keyed):
        record = memory_record(t)
        if record is None or record.memory_kind != "cuda" or not record.memory_limit_gib:
            continue
        need = headroom.need_gib(record)
        if need is not None:
            found.setdefault(record.memory_limit_gib, []).append((need, i))
    out = []
    for limit, pairs in found.items():
        pairs.sort()
        out.append(_Needs(limit, [n for n, _ in pairs], [i for _, i in pairs]))
    return out
