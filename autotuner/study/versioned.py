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
    """One value per (database, study, trials version), the least recently used dropped past
    `size`. Not copied: big values (a study's measured configs and their rows)
    are read-only, shared by the requests that use them.

    Kept out of the cyclic collector's reach: a 50,000-trial study's value is a few hundred
    thousand objects that the collector tracks, and each full collection walked them all
    (250 ms, in whatever request it fell: the 200-study list's p99 of 80 to 220 ms). So a
    value kept is frozen (`gc.freeze`) with what else lives then, after a collection (no
    garbage is frozen); an entry dropped unfreezes them first, so that its cycles, if any,
    are collected there and not kept for good."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, s: Session, study: Study, compute: Callable[[], T]) -> T:
        """The study's value at the version read with its row; `compute()` reads in `s` where
        it is not known. Kept only if the version is the same after it (on Postgres each
        statement sees what has committed before it: a trial written between the study's row
        and compute's reads would otherwise be kept under the version before it)."""
        from autotuner.storage.trial_rows import trials_version

        key = (str(s.get_bind().engine.url), study.id, study.trials_version)
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return cast(T, self._values[key])
        value = compute()
        if trials_version(s, study.id) == study.trials_version:
            dropped = []
            with self._lock:
                self._values[key] = value
                while len(self._values) > self.size:
                    dropped.append(self._values.popitem(last=False))
            _keep_frozen(dropped)
        return value

    def clear(self) -> None:
        with self._lock:
            self._values.clear()


def _keep_frozen(dropped: list[Any]) -> None:
    """Freeze what lives now (the value just kept among it) out of the collector's reach,
    after a full collection; with `dropped` entries, first unfreeze, so that the collection
    frees their cycles. Its cost (one full collection) is paid where a value is computed
    (seconds at 50,000 trials), not in the reads that follow."""
    import gc

    if dropped:
        gc.unfreeze()
    dropped.clear()  # their last references: freed by reference counting or the collection
    gc.collect()
    gc.freeze()


# A summary's own copy: its counts dict (copy.deepcopy of 200 of them was a fifth of the
# 200-study list's time).
SUMMARIES = VersionedCache(copy=lambda summary: summary.copy())
