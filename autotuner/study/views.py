"""JSON shapes of studies and trials, shared by the CLI's `--json` output and the HTTP API.

One place decides what a study or a trial looks like to the outside, so the CLI on a local
database and the CLI against the service print the same thing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from types import EllipsisType
from typing import TYPE_CHECKING, Any

from autotuner.search.ended_checks import headroom_as_ended, numerics_as_ended
from autotuner.status import ENDED_STATUSES, TrialState
from autotuner.storage.trial_list import SHOWN
from autotuner.study.batch import of_trial
from autotuner.study.columns import MEMORY_FIELDS, memory_record
from autotuner.study.trial_list import list_view

if TYPE_CHECKING:
    from sqlalchemy import Row

    from autotuner.options import StudyOptions
    from autotuner.storage.models import Study, Trial

    # A study as an ORM object or as a Core row of its columns (storage/reads.py): a view
    # reads the same attributes of both.
    StudyRow = Study | Row[Any]


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def trial_view(
    t: Trial, *, full: bool = False, options: StudyOptions | None = None
) -> dict[str, Any]:
    """A trial as lists show it (trial_list.list_view), from its columns, or from its loaded
    JSON where a row built in memory has only that; the config and result JSON are added for
    `full`, one trial's page. Lists read plain rows instead (storage.trial_list.list_rows)."""
    values = [getattr(t, name) for name in SHOWN]
    values[SHOWN.index("global_batch_tokens")] = of_trial(t)
    record = memory_record(t)
    if record is not None:
        for name in MEMORY_FIELDS:
            values[SHOWN.index(name)] = getattr(record, name)
    out = list_view(values, options, t.params)
    if full:
        out["config"] = t.config
        out["result"] = t.result
    return out


@dataclass
class TrialSummary:
    """A study's trials in numbers, from one grouped SQL statement (operations.summaries)."""

    counts: dict[str, int] = field(default_factory=dict)  # trials per state
    launched: int = 0  # trials that count against max_trials: not pruned, not retries
    best_value: float | None = None  # the highest objective value of a measured search trial

    def copy(self) -> TrialSummary:
        """A copy the caller may change (the per-version cache hands out copies)."""
        return TrialSummary(dict(self.counts), self.launched, self.best_value)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def finished(self) -> int:
        return self.total - self.counts.get(TrialState.RUNNING.value, 0)


def _minutes_used(study: StudyRow) -> float | None:
    """Minutes from the study's start to its end (or to now while it runs); None before it
    started. Against max_minutes, what `--minutes` has spent."""
    if study.started_at is None:
        return None
    end = study.finished_at or dt.datetime.now(dt.UTC)
    start = study.started_at
    # SQLite hands back naive datetimes; they are UTC (storage/tables.py stores UTC).
    start, end = (x if x.tzinfo else x.replace(tzinfo=dt.UTC) for x in (start, end))
    # Waits for the cluster or the GPUs are not spent (study/pause.py).
    used = (end - start).total_seconds() - (study.paused_s or 0.0)
    return round(max(used, 0.0) / 60.0, 2)


def study_view(
    study: StudyRow,
    summary: TrialSummary,
    *,
    space_name: str | None,
    recommended_value: float | EllipsisType | None = ...,
) -> dict[str, Any]:
    """A study's summary and its progress against its trial budget. `recommended_value`: the
    stored recommendation's objective value, where the caller read only that of it (a list,
    the recommendation itself deferred); by default taken from the study's recommendation."""
    if isinstance(recommended_value, EllipsisType):
        recommended_value = (study.recommendation or {}).get("objective_value")
    minutes_used = _minutes_used(study)
    progress = None
    if study.max_trials:
        progress = min(summary.launched / study.max_trials, 1.0)
    if study.max_minutes and minutes_used is not None:
        # The study ends at whichever budget is spent first: the bar shows the fuller one.
        by_time = min(minutes_used / study.max_minutes, 1.0)
        progress = by_time if progress is None else max(progress, by_time)
    return {
        "id": study.id,
        "name": study.name,
        "status": study.status,
        "objective": study.objective,
        "model": study.model_spec,
        "space": space_name,
        "sampler": study.sampler,
        "gpus_per_trial": study.gpus_per_trial,
        "device_type": study.device_type,
        "max_trials": study.max_trials,
        "max_minutes": study.max_minutes,
        "trial_counts": summary.counts,
        "trials_total": summary.total,
        "trials_finished": summary.finished,
        "trials_launched": summary.launched,
        "progress": progress,
        "minutes_used": minutes_used,
        "best_value": summary.best_value,
        # What the recommendation stands on (a median over its measurements): the fastest
        # measured trial (best_value) may be one it passed over (tight memory, failed numerics).
        "recommended_value": recommended_value,
        "best_trial_number": study.best_trial_number,
        "error_message": study.error_message,
        "waiting": study.waiting,
        "created_at": _iso(study.created_at),
        "started_at": _iso(study.started_at),
        "finished_at": _iso(study.finished_at),
    }


def best_view(
    study: StudyRow,
    summary: TrialSummary,
    recommendation: dict[str, Any] | None,
    *,
    tight_fastest: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The current best: the recommendation stored on the study (live after each finished
    trial, final with its evidence once the study is over; study/live.py). `tight_fastest`:
    for an ended study with none because every measured trial was tight, its fastest."""
    return {
        "study": study.id,
        "status": study.status,
        "completed_trials": summary.counts.get(TrialState.COMPLETE.value, 0),
        "total_trials": summary.total,
        "max_trials": study.max_trials,
        "best": _as_of_status(study.status, recommendation),
        "tight_fastest": tight_fastest,
        # Why a failed study failed, in one line (study/ending.py): what `best` says first.
        "error_message": study.error_message,
    }


def _as_of_status(status: str, rec: dict[str, Any] | None) -> dict[str, Any] | None:
    """`rec` as true for a study in `status`: once it has ended, a numerics or headroom check
    that never started did not run (the end of a study stores it so; this reads a study
    recorded before)."""
    if rec is None or status not in ENDED_STATUSES:
        return rec
    out = dict(rec)
    if rec.get("numerics"):
        out["numerics"] = numerics_as_ended(rec["numerics"])
    if rec.get("headroom"):
        out["headroom"] = headroom_as_ended(rec["headroom"])
    return out


def predictions_view(recommendation: dict[str, Any] | None, number: int) -> dict[str, Any]:
    """What the study's models predicted for trial `number` before it ran (the cost model's
    peak memory, the throughput model's tokens/s with its sd) beside what it measured, from the
    evidence a finished study stores (search/evidence.py); `note` says why one is missing."""
    cost = (recommendation or {}).get("cost_model")
    speed = (recommendation or {}).get("throughput_model") or {}
    if cost is None:
        waiting = (
            "the models' at-launch predictions are stored with the study's evidence, "
            "when the study finishes"
        )
        return {"memory": None, "throughput": None, "limit_gib": None, "note": waiting}

    def find(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
        return next((e for e in entries if e.get("trial_number") == number), None)

    memory, throughput = find(cost.get("trials", [])), find(speed.get("trials", []))
    note: str | None = None
    if memory is None and throughput is None:
        note = (
            "no prediction for this trial: the evidence keeps the measured trials of the "
            "search (its last 200), not failed, pruned or end-of-study ones"
        )
    return {
        "memory": memory,
        "throughput": throughput,
        "limit_gib": cost.get("memory_limit_gib"),
        "note": note,
    }
