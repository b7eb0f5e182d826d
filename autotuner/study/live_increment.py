"""The live recommendation kept up to date one finished trial at a time.

Recomputing it from every trial after each one (study/live.py) read and ranked the whole
study: 3.4 s at 50,000 trials, per trial. Most finished trials cannot move the winner: a new
config measured below the best ones. For such a trial only three things in the
recommendation change, and each is kept here from the last full computation: the count of
measured trials, the study's noise band (the median of every config's repeat spread: a sorted
list, one insertion) and the Pareto front (the new point against the front alone). So
`LiveBest.store` reads the trials that finished since its last read (storage/ended_feed.py: a
range of trial numbers through the (study, number) index, those that ended while an earlier one
still runs included), and for each judges it against what it knows:

- not measured (failed, pruned) and no end check: the recommendation reads no such trial;
- measured but kept out (less memory free than the headroom, stopped after its first repeats,
  no throughput) and not faster than the winner: nothing it reads changes;
- a new config below the configs the choice looks at (the winner, the runner-up and the
  configs that may tie it, with every config failed or passed over before them): the count,
  the noise band and the front change, as above.

Anything else (a re-measurement, the expert default, an end check, a config that ranks among
the top ones, a new global batch, a bottlenecked input pipeline, a study small enough that every
config is a top one) is computed in full again, which also renews what is known. The result is
the full computation's, key for key (tests/coordinator/test_live_increment.py checks it on
random trial streams).
"""

from __future__ import annotations

import bisect
import copy
import statistics
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from autotuner.options import StudyOptions
from autotuner.purpose import END_CHECKS, Purpose
from autotuner.search import headroom_check, numerics
from autotuner.search.noise import noise_band
from autotuner.search.objective import Objective
from autotuner.search.pareto import pareto_sweep
from autotuner.spec import canonical_params
from autotuner.storage import trial_rows
from autotuner.storage.ended_feed import EndedFeed
from autotuner.storage.models import Trial, TrialState
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.study.batch import of_trial
from autotuner.study.gc_pause import gc_paused
from autotuner.study.measurements import (
    ConfigMeasurements,
    group_measurements,
    keyed_candidates,
    over_memory,
    stopped_early,
)
from autotuner.study.recommend import TIE_LOOKAHEAD, recommend


@dataclass
class _Front:
    """A Pareto front entry with what orders it against a new point."""

    value: float
    mem: float
    remeasured: bool
    entry: dict[str, Any]


@dataclass
class Known:
    """What the last full computation left, for judging the next trials."""

    rec: dict[str, Any]
    keys: set[str]  # every measured config's key, kept-out ones too
    groups: dict[str, ConfigMeasurements]  # the ranked configs by key
    checked: set[str]  # configs with a headroom or numerics check
    within: list[float]  # each ranked config's repeat spread, sorted
    betweens: list[float]  # the spreads between fresh processes of those measured again, sorted
    count: int  # measured trials of the ranked configs
    floor: ConfigMeasurements  # the last config the choice may look at, in rank order
    front: list[_Front]
    sizes: set[int]  # the global batches of the measured trials
    expert_tokens: int | None
    ended: EndedFeed  # the trials folded in: the next to fold are those it takes
    options: StudyOptions  # what it was judged at


def _median_sorted(values: list[float]) -> float:
    """statistics.median of an already sorted list, without sorting it again."""
    n = len(values)
    mid = n // 2
    return values[mid] if n % 2 else (values[mid - 1] + values[mid]) / 2


def _floor(
    ranked: list[ConfigMeasurements], rec: dict[str, Any], failed: set[str]
) -> ConfigMeasurements | None:
    """The last config in rank order that the choice may read: past the winner, the runner-up
    and the TIE_LOOKAHEAD configs that may tie it, counting only configs not failed (the ones
    skipped over are before them in rank order). None where the study has no config below."""
    numbers = {rec["trial_number"], (rec.get("runner_up") or {}).get("trial_number")}
    last_top = max(i for i, g in enumerate(ranked) if g.first.number in numbers)
    cut, alive = last_top, 0
    while alive < TIE_LOOKAHEAD + 2 and cut + 1 < len(ranked):
        cut += 1
        alive += ranked[cut].key not in failed
    if alive < TIE_LOOKAHEAD + 2:
        return None
    return ranked[cut]


def know(
    rows: list[Trial], rec: dict[str, Any] | None, options: StudyOptions, ended: EndedFeed
) -> Known | None:
    """What to keep of a full computation over `rows`; None where the next trial is to be
    computed in full anyway (no recommendation, checks past their bound, a small study)."""
    if rec is None or (rec.get("input_pipeline") or {}).get("bottleneck"):
        return None
    ranked = group_measurements(rows, options)
    room = headroom_check.checks_of(ranked, rows, options)
    eligible = headroom_check.surviving(ranked, room) or ranked
    checks = numerics.checks_of(eligible, rows)
    if sum(1 for c in checks.values() if c.state == "failed") >= numerics.MAX_CHECKED:
        return None  # the choice then reads every config's numerics
    failed = {key for key, c in checks.items() if c.state == "failed"}
    failed |= {key for key in room if key not in {g.key for g in eligible}}
    floor = _floor(ranked, rec, failed)
    if floor is None:
        return None
    pareto_numbers = {p["trial_number"] for p in rec["pareto"]}
    front = [
        _Front(p["objective_value"], p["peak_mem_gib"], g.remeasured, p)
        for g in ranked
        if g.first.number in pareto_numbers
        for p in rec["pareto"]
        if p["trial_number"] == g.first.number
    ]
    measured = [t for t in rows if t.state == TrialState.COMPLETE and t.purpose not in END_CHECKS]
    expert = (rec.get("global_batch") or {}).get("expert_default") or {}
    return Known(
        rec=rec,
        keys={key for key, _ in keyed_candidates(rows, stopped_early_too=True)},
        groups={g.key: g for g in ranked},
        checked=set(room) | set(checks),
        within=sorted(g.within_rel for g in ranked),
        betweens=sorted(g.between_rel for g in ranked if len(g.trials) > 1),
        count=sum(len(g.trials) for g in ranked),
        floor=floor,
        front=front,
        sizes={n for t in measured if (n := of_trial(t)) is not None},
        expert_tokens=expert.get("tokens"),
        ended=ended,
        options=options,
    )


def _after(g: ConfigMeasurements, floor: ConfigMeasurements) -> bool:
    """Whether config `g` (not re-measured) ranks after `floor`: re-measured configs rank
    first, the rest by median, an equal one by its first trial (rank_groups' stable sort)."""
    if floor.remeasured:
        return True
    return g.median < floor.median or (
        g.median == floor.median and g.first.number > floor.first.number
    )


def _same_batch(t: Trial, known: Known) -> bool:
    n = of_trial(t)
    return n in known.sizes and (len(known.sizes) <= 1 or n != known.expert_tokens)


def apply(known: Known, t: Trial, options: StudyOptions) -> bool:
    """Fold one finished trial into `known` (its recommendation included); False where it
    must be computed in full (nothing is changed then)."""
    if t.purpose in END_CHECKS:
        return False
    if t.state != TrialState.COMPLETE:
        return True  # not read by the recommendation
    if not _same_batch(t, known) or t.purpose in (Purpose.EXPERT_DEFAULT, Purpose.REMEASURE):
        return False
    if not t.objective_value or t.tokens_per_s is None:
        return True  # no measurement: not read by the recommendation
    key = canonical_params(t.params)
    if stopped_early(t) or over_memory(t, options):
        # Kept out of the ranking: it reads only as a config passed over for memory, faster
        # than the winner, or as another measurement of a config (the expert default's).
        if key in known.keys or t.objective_value > known.rec["objective_value"]:
            return False
        known.keys.add(key)
        return True
    old = known.groups.get(key)
    if old is None and key in known.keys:
        return False  # a config kept out so far: it may rank now
    if old is not None and not _quiet_group(known, old):
        return False
    if old is not None and t.number < old.trials[-1].number:
        # It ended after a later-numbered trial of its config (both ran at once): the full
        # computation groups by number, and the config's first trial names it on the front.
        return False
    group = ConfigMeasurements(key, [*(old.trials if old else ()), t])
    if not _after(group, known.floor):
        return False
    front_at = {f.entry["trial_number"] for f in known.front}
    if old is not None and old.first.number in front_at:
        return False  # it may leave the front, and show what it hid
    _swap(known.within, old.within_rel if old else None, group.within_rel)
    _swap(
        known.betweens,
        old.between_rel if old and len(old.trials) > 1 else None,
        group.between_rel if len(group.trials) > 1 else None,
    )
    known.groups[key] = group
    known.keys.add(key)
    known.count += 1
    rec = known.rec
    rec["completed_trials"] = known.count
    between = known.betweens[-1] if known.betweens else 0.0
    rec["noise_rel"] = round(noise_band(_median_sorted(known.within), between), 4)
    if mems := group.peak_mems:
        _add_to_front(known, group, statistics.median(mems))
    return True


def _quiet_group(known: Known, g: ConfigMeasurements) -> bool:
    """Whether another measurement of `g` moves nothing but `g`: a config below the ones the
    choice reads (`_after`), not checked, not the expert default's, in a study of one global
    batch (which config is best at the expert default's goes by rank)."""
    if g.key in known.checked or g.remeasured or len(known.sizes) > 1:
        return False
    if any(t.purpose == Purpose.EXPERT_DEFAULT for t in g.trials):
        return False
    return g.key != known.floor.key and _after(g, known.floor)


def _swap(values: list[float], old: float | None, new: float | None) -> None:
    """`old` out of the sorted list (one copy), `new` into it."""
    if old is not None:
        del values[bisect.bisect_left(values, old)]
    if new is not None:
        bisect.insort(values, new)


def _add_to_front(known: Known, g: ConfigMeasurements, mem: float) -> None:
    """The front with config `g`'s point (not on it before), as recommend.pareto computes it
    over every config: in rank order, swept by memory."""
    entry = {
        "trial_number": g.first.number,
        "objective_value": g.median,
        "peak_mem_gib": mem,
        "params": g.first.params,
    }
    new = _Front(g.median, mem, False, entry)
    at = next(
        (
            i
            for i, f in enumerate(known.front)
            if not f.remeasured
            and (
                f.value < g.median
                or (f.value == g.median and f.entry["trial_number"] > g.first.number)
            )
        ),
        len(known.front),
    )
    points = [*known.front[:at], new, *known.front[at:]]
    kept = pareto_sweep([(p.value, p.mem) for p in points])  # by memory, as pareto() lists
    known.front = [points[i] for i in sorted(kept)]  # kept in rank order, for the next one
    known.rec["pareto"] = [points[i].entry for i in kept]


class LiveBest:
    """A study's live recommendation as its coordinator keeps it (StudyLease.store_live_best)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.known: Known | None = None
        self.full_computations = 0  # how often it read every trial (tests, the benchmark)

    def store(
        self,
        study_id: str,
        objective: Objective,
        options: StudyOptions,
        *,
        owner: str | None = None,
    ) -> dict[str, Any] | None:
        """The recommendation as the study's trials stand now, stored on the study row
        (with `owner`, only while that coordinator holds its lease); returned."""
        rec = self._incremental(study_id, options)
        if rec is None:
            rec = self._full(study_id, objective, options)
        with self.db.session() as s:
            StudyRepo(s).store_live(study_id, rec, owner=owner)
        return copy.deepcopy(rec)

    def forget(self) -> None:
        """The next `store` reads every trial (something changed that no trial says)."""
        self.known = None

    def current(self, s: Session, study_id: str, options: StudyOptions) -> dict[str, Any] | None:
        """The recommendation as the trials stand in `s`'s read, where it follows from what is
        kept (a copy; nothing stored); None where it must be computed from every trial (the
        end of a study: lifecycle.StudyLease.finish)."""
        known = self.known
        if known is None or known.options != options:
            return None
        rec = self._fold(s, known, study_id, options)
        return None if rec is None else copy.deepcopy(rec)

    def _incremental(self, study_id: str, options: StudyOptions) -> dict[str, Any] | None:
        known = self.known
        if known is None or known.options != options:
            return None
        with self.db.read() as s:
            return self._fold(s, known, study_id, options)

    def _fold(
        self, s: Session, known: Known, study_id: str, options: StudyOptions
    ) -> dict[str, Any] | None:
        """Fold the trials that ended since the last read into `known`; its recommendation,
        or None (and nothing kept) where one needs the full computation."""
        ended, running = known.ended.take(
            s, lambda low, _high: trial_rows.rows_from(s, study_id, low), _number, _ended
        )
        # A running trial read is an end check (the only kind read before it ends), which
        # the full computation reads in any state.
        if running or not all(apply(known, t, options) for t in ended):
            self.known = None
            return None
        return known.rec

    def _full(
        self, study_id: str, objective: Objective, options: StudyOptions
    ) -> dict[str, Any] | None:
        self.full_computations += 1
        with self.db.read() as s, gc_paused():
            rows: list[Trial] = []

            def every(_low: int, _high: int) -> list[Trial]:
                rows.extend(trial_rows.recommendation_rows(s, study_id))
                return rows

            # The feed takes every ended trial read: the next fold reads from there.
            ended = EndedFeed(study_id)
            ended.take(s, every, _number, _ended)
            rec = recommend(rows, objective, options=options)
            known = know(rows, copy.deepcopy(rec), options, ended)
        self.known = known
        return rec


def _number(t: Trial) -> int:
    return t.number


def _ended(t: Trial) -> bool:
    return t.state != TrialState.RUNNING
