"""What the recommendation and the trial lists read of a trial: its columns, not its JSON.

A trial's `config` and `result` JSON are read for the few trials that need them (the winner,
the end checks, one trial's page); everything read of every trial is a column of its own
(migrations 0002, 0003), so a study of 10,000 trials is read in one statement, not one per row.
A row built in memory (tests, a result not stored yet) has only its JSON: it is read from
there, and only where it is loaded, never fetched row by row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotuner.storage.models import Trial

# The fields of a result that say how much memory it needed and of what (search/headroom.py).
MEMORY_FIELDS = (
    "peak_mem_gib",
    "peak_reserved_gib",
    "peak_mem_with_eval_ckpt_gib",
    "peak_reserved_with_eval_ckpt_gib",
    "memory_kind",
    "memory_limit_gib",
)


def loaded(t: Trial, name: str) -> bool:
    """Whether the row's attribute is in memory (not deferred, not expired): reading it costs
    no statement. (The instance's dict holds exactly those; `inspect(t).unloaded` says the
    same at ten times the cost, which counts once per row of 10,000.)"""
    return name in t.__dict__


def column_or_json(t: Trial, name: str, from_json: Callable[[], Any]) -> Any:
    """The column `name`, else what `from_json` reads of the row's JSON when that is loaded."""
    value = getattr(t, name)
    if value is None and loaded(t, "result") and loaded(t, "config"):
        value = from_json()
    return value


def measured(t: Trial, name: str) -> Any:
    """A metric of a trial: its column, else its loaded result's field."""
    value = getattr(t, name)
    if value is None and loaded(t, "result") and t.result:
        value = t.result.get(name)
    return value


@dataclass(frozen=True)
class MemoryRecord:
    """A trial's memory fields (search/headroom.py's MemoryReport), from its columns."""

    peak_mem_gib: float | None
    peak_reserved_gib: float | None
    peak_mem_with_eval_ckpt_gib: float | None
    peak_reserved_with_eval_ckpt_gib: float | None
    memory_kind: str | None
    memory_limit_gib: float | None


def memory_record(t: Trial) -> MemoryRecord | None:
    """The trial's memory record, for search/headroom.py's functions; None for a trial that
    measured no peak. (Not a TrialResult: building one per row of a list cost 2 ms each.)"""
    values = [getattr(t, name) for name in MEMORY_FIELDS]
    if None in values and loaded(t, "result") and t.result:
        stored = t.result
        values = [
            stored.get(name) if v is None else v
            for name, v in zip(MEMORY_FIELDS, values, strict=True)
        ]
    record = MemoryRecord(*values)
    if record.peak_mem_gib is None and record.peak_mem_with_eval_ckpt_gib is None:
        return None
    return record


def load_json(trials: Sequence[Trial], names: Sequence[str] = ("config", "result")) -> None:
    """Read the JSON `names` of these trials where not in memory, in one statement (not one
    per row, as reading each attribute would): storage/trial_rows.load_json, for plain rows
    and ORM rows alike. Rows built in memory, in no session, are left as they are."""
    from autotuner.storage import trial_rows

    trial_rows.load_json(trials, names)
