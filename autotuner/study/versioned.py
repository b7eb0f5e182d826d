"""What a read derives from every trial of a study, kept per study version.

A study view, a best view and an export each need the study's trial counts per state and its
best value: a grouped read of every trial (92 ms at 50,000 trials; 30 clients polling a study
spent the service's CPU on it). They change only when a trial is written, and every such
transaction moves `studies.trials_version` (storage/trial_versions.py), which the read has in
hand with the study row. So each process keeps the last values per (database, study, version)
and derives them again only for a version it has not seen.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from sqlalchemy import Connection, Row
    from sqlalchemy.orm import Session

    from autotuner.storage.models import Study

T = TypeVar("T")
S = TypeVar("S")
KEPT = 1024  # entries per process: a few hundred studies' views, a few kB each


def bind_of(s: Any) -> Any:
    """What a session runs on (its engine or connection), or a Core connection itself: its
    `engine` and `get_execution_options()` are what a cached read is keyed and judged on."""
    return s.get_bind() if hasattr(s, "get_bind") else s


class VersionedCache:
    """Values keyed on a study's trials version (and what else the caller says), the least
    recently used dropped past `size`. Values are copied out: a caller may change its own."""

    def __init__(self, size: int = KEPT, copy: Callable[[Any], Any] = copy.deepcopy) -> None:
        self.size = size
        self._copy = copy
        self._values: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()

    def get_many(
        self,
        s: Session | Connection,
        studies: Sequence[Study | Row[Any]],
        compute: Callable[[list[str]], dict[str, T]],
        *extra: Any,
    ) -> dict[str, T]:
        """Each study's value at its version (the one read with its row): the cached ones,
        and `compute(ids)` for those not known at that version, in one call."""
        where = str(bind_of(s).engine.url)
        keys = {st.id: (where, st.id, st.trials_version, *extra) for st in studies}
        out: dict[str, T] = {}
        with self._lock:
            for study_id, key in keys.items():
                if key in self._values:
                    self._values.move_to_end(key)
                    out[study_id] = self._copy(self._values[key])
        missing = [study_id for study_id in keys if study_id not in out]
        if missing:
            fresh = compute(missing)
            with self._lock:
                for study_id, value in fresh.items():
                    self._values[keys[study_id]] = self._copy(value)
                while len(self._values) > self.size:
                    self._values.popitem(last=False)
            out.update(fresh)
        return out

    def clear(self) -> None:
        with self._lock:
            self._values.clear()


class VersionedObjects:
    """One value per (database, study) at one trials version, the least recently used study
    dropped past `size`. Not copied: big values (a study's measured configs and their rows,
    its charts) are read-only, shared by the requests that use them.

    A value may be derived from a state kept across the study's versions (`follow`): what a
    study's ended trials give does not change as more trials end, so a new version reads and
    folds in only the trials since (the dashboard's charts: dashboard/charts_kept.py). One
    caller per study computes at a time; another waits for its answer rather than compute
    the same beside it.

    Kept out of the cyclic collector's reach: a 50,000-trial study's value or state is a few
    hundred thousand objects that the collector tracks, and each full collection walked them
    all (250 ms, in whatever request it fell: the 200-study list's p99 of 80 to 220 ms). So a
    value kept is frozen (`gc.freeze`) with what else lives then, after a collection (no
    garbage is frozen); a study dropped unfreezes them first, so that its cycles, if any, are
    collected there and not kept for good."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._studies: OrderedDict[tuple[str, str], _Kept] = OrderedDict()
        # Studies let go (another `same`) since the last value kept: unfrozen at the next.
        self._dropped: list[_Kept] = []
        self._lock = threading.Lock()

    def get(self, s: Session, study: Study, compute: Callable[[], T]) -> T:
        """The study's value at the version read with its row; `compute()` reads in `s` where
        it is not known. The value it replaces is dropped (unfrozen, its cycles collected)."""
        return self.follow(s, study, _stateless, lambda _: compute())

    def follow(
        self,
        s: Session,
        study: Study,
        start: Callable[[], S],
        compute: Callable[[S], T],
        same: Any = None,
    ) -> T:
        """The study's value at the version read with its row; where it is not known,
        `compute(state)` reads it in `s` from the study's state: kept across its versions,
        made by `start()` for a study new here or kept with another `same`. compute may
        advance the state in place with what stays true at every later version (trials that
        have ended: storage/ended_feed.py). The value is kept only if the version is the
        same after compute (on Postgres each statement sees what has committed before it: a
        trial written between the study's row and compute's reads would otherwise be kept
        under the version before it).

        Where a state is kept, the value a new version replaces is let go by reference
        counting alone, frozen: it is what the state gives at one version (plain data for a
        response, no cycles), its bulk lives on in the state, and unfreezing to collect it
        would walk every frozen object (the service's, the other studies') at each version."""
        from autotuner.storage.trial_rows import trials_version

        where = (str(s.get_bind().engine.url), study.id)
        kept = self._kept(where, start, same)
        with kept.lock:
            if kept.known and kept.version == study.trials_version:
                return cast(T, kept.value)
            value = compute(cast(S, kept.state))
            if trials_version(s, study.id) != study.trials_version:
                return value
            with self._lock:
                if self._studies.get(where) is not kept:
                    return value  # dropped meanwhile: its state is no longer kept
                # The value it replaces, if it is all there is (get): dropped as a study is.
                dropped: list[Any] = [kept.value] if kept.state is None and kept.known else []
                kept.known, kept.version, kept.value = True, study.trials_version, value
                dropped += self._dropped
                self._dropped = []
                while len(self._studies) > self.size:
                    dropped.append(self._studies.popitem(last=False)[1])
        _keep_frozen(dropped)
        return value

    def _kept(self, where: tuple[str, str], start: Callable[[], Any], same: Any) -> _Kept:
        with self._lock:
            kept = self._studies.get(where)
            if kept is None or kept.same != same:
                if kept is not None:
                    self._dropped.append(kept)
                kept = self._studies[where] = _Kept(start(), same)
            self._studies.move_to_end(where)
            return kept

    def clear(self) -> None:
        with self._lock:
            self._studies.clear()
            self._dropped.clear()


class _Kept:
    """A study's entry: its state (None for `get`), the version its value is of."""

    def __init__(self, state: Any, same: Any) -> None:
        self.state, self.same = state, same
        self.lock = threading.Lock()  # held while a value is computed
        self.known = False  # whether `value` is of `version`: none computed yet
        self.version: int | None = None
        self.value: Any = None


def _stateless() -> None:
    return None


def _keep_frozen(dropped: list[Any]) -> None:
    """Freeze what lives now (the value just kept among it) out of the collector's reach,
    after a collection of the young generations; with `dropped` entries, first unfreeze, so
    that a full collection (of every object) frees their cycles. Its cost is paid where a
    value is computed, not in the reads that follow.

    Without a drop the collection is of the young generations only: the value just built was
    mostly promoted to the oldest while it was built, and a full collection walked all of it
    (0.23 s of a 10,000-trial study page's first view, whose target is 2 s; the young ones:
    23 ms). Cyclic garbage already in the oldest generation is frozen with the rest, and freed
    at the next drop's full collection; the collector's own full passes free what dies after."""
    import gc

    full = bool(dropped)
    if full:
        gc.unfreeze()
    dropped.clear()  # their last references: freed by reference counting or the collection
    gc.collect(2 if full else 1)
    gc.freeze()


# A summary's own copy: its counts dict (copy.deepcopy of 200 of them was a fifth of the
# 200-study list's time).
SUMMARIES = VersionedCache(copy=lambda summary: summary.copy())
