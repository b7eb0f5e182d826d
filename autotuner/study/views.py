"""JSON shapes of studies and trials, shared by the CLI's `--json` output and the HTTP API.

One place decides what a study or a trial looks like to the outside, so the CLI on a local
database and the CLI against the service print the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotuner.options import StudyOptions
from autotuner.search import headroom
from autotuner.search.objective import Objective
from autotuner.spec import TrialResult
from autotuner.storage.models import Study, Trial, TrialState
from autotuner.study.batch import global_batch_tokens
from autotuner.study.recommend import recommend


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def trial_view(
    t: Trial, *, full: bool = False, options: StudyOptions | None = None
) -> dict[str, Any]:
    """A trial; with its study's `options`, whether it is `tight` (less than the memory
    headroom free: search/headroom.py), which keeps it from being recommended."""
    result = t.result or {}
    record = TrialResult.model_construct(**result) if result else None  # read, not validated
    need = headroom.need_gib(record) if record else None
    limit = result.get("memory_limit_gib")
    on_gpu = result.get("memory_kind") == "cuda"
    out: dict[str, Any] = {
        "number": t.number,
        "state": t.state,
        "purpose": t.purpose,
        "attempt": t.attempt,
        "retry_of": t.retry_of,
        "params": t.params,
        "tokens_per_s": t.tokens_per_s,
        "tokens_per_s_min": result.get("tokens_per_s_min"),
        "tokens_per_s_max": result.get("tokens_per_s_max"),
        "tokens_per_s_per_gpu": t.tokens_per_s_per_gpu,
        "mfu": t.mfu,
        "peak_mem_gib": t.peak_mem_gib,
        "compile_s": t.compile_s,
        "global_batch_tokens": global_batch_tokens(t.config, result),
        "memory_free_rel": headroom.free_rel(need, limit) if on_gpu else None,
        "tight": bool(
            options is not None
            and record is not None
            and t.state == TrialState.COMPLETE
            and headroom.violation(record, options) > 0
        ),
        "objective_value": t.objective_value,
        "error_class": t.error_class,
        "error_message": t.error_message,
        "worker": t.worker,
        "fingerprint": t.fingerprint,
        "started_at": _iso(t.started_at),
        "finished_at": _iso(t.finished_at),
    }
    if full:
        out["config"] = t.config
        out["result"] = t.result
    return out


def study_view(
    study: Study, trials: Sequence[Trial], *, counts: dict[str, int] | None = None
) -> dict[str, Any]:
    """A study's summary; `counts` (trials per state) spares loading the trials for a list."""
    if counts is None:
        counts = {}
        for t in trials:
            counts[t.state] = counts.get(t.state, 0) + 1
    return {
        "id": study.id,
        "name": study.name,
        "status": study.status,
        "objective": study.objective,
        "model": study.model_spec,
        "space": study.space.get("name"),
        "sampler": study.sampler,
        "gpus_per_trial": study.gpus_per_trial,
        "max_trials": study.max_trials,
        "max_minutes": study.max_minutes,
        "trial_counts": counts,
        "best_trial_number": study.best_trial_number,
        "error_message": study.error_message,
        "created_at": _iso(study.created_at),
        "started_at": _iso(study.started_at),
        "finished_at": _iso(study.finished_at),
    }


def best_view(study: Study, trials: Sequence[Trial]) -> dict[str, Any]:
    """The current best: the stored recommendation once finished, else computed live."""
    rec = study.recommendation
    if rec is None:
        rec = recommend(trials, Objective(study.objective), options=study.options)
    done = sum(1 for t in trials if t.state == TrialState.COMPLETE)
    return {
        "study": study.id,
        "status": study.status,
        "completed_trials": done,
        "total_trials": len(trials),
        "max_trials": study.max_trials,
        "best": rec,
    }
