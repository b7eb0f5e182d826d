"""A trial as lists show it, from the plain column rows storage/trial_list.py reads: the trial
pages' hot path.

`list_view` turns one row's values into the view (views.trial_view builds the same one from an
ORM trial); `page_json` encodes a page once. `params` comes as the JSON text the database holds
and is decoded by orjson: psycopg's JSONB loader (the standard library's json, one call per
row) cost more than the rest of the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from autotuner.purpose import Purpose
from autotuner.search import headroom
from autotuner.status import TrialState
from autotuner.storage.trial_list import SHOWN
from autotuner.study.columns import MemoryRecord

if TYPE_CHECKING:
    from sqlalchemy import Row

    from autotuner.search.headroom import HeadroomSetting

_COMPLETE = TrialState.COMPLETE.value
# The purposes whose runs measure no throughput: the numerics check's parity runs.
NOT_MEASUREMENTS = frozenset({Purpose.PARITY, Purpose.PARITY_REFERENCE})


def memory_judgement(
    state: str, record: MemoryRecord, options: HeadroomSetting | None
) -> tuple[float | None, bool]:
    """(the share of the GPU's memory the trial left free, whether it is `tight`: a complete
    trial that left less than the study's headroom free, which keeps it from being
    recommended). A trial that measured no peak (pruned, failed) has nothing to judge."""
    if record.peak_mem_gib is None and record.peak_mem_with_eval_ckpt_gib is None:
        return None, False
    free_rel = None
    if record.memory_kind == "cuda":
        free_rel = headroom.free_rel(headroom.need_gib(record), record.memory_limit_gib)
    tight = bool(
        options is not None and state == _COMPLETE and headroom.violation(record, options) > 0
    )
    return free_rel, tight


def list_view(
    values: Sequence[Any], options: HeadroomSetting | None, params: Any
) -> dict[str, Any]:
    """The list view of a trial from its `SHOWN` values (a row of storage.trial_list's
    `COLUMNS`, or a trial's attributes), with `params` as given. With its study's `options`,
    whether it is `tight` (less than the memory headroom free: search/headroom.py), which keeps
    it from being recommended."""
    (
        number,
        state,
        purpose,
        attempt,
        retry_of,
        tokens_per_s,
        tokens_per_s_min,
        tokens_per_s_max,
        tokens_per_s_per_gpu,
        mfu,
        peak_mem_gib,
        compile_s,
        wall_s,
        global_batch,
        objective_value,
        error_class,
        error_message,
        worker,
        fingerprint,
        started_at,
        finished_at,
        peak_reserved_gib,
        peak_eval_gib,
        reserved_eval_gib,
        memory_kind,
        limit_gib,
    ) = values[: len(SHOWN)]
    free_rel, tight = memory_judgement(
        state,
        MemoryRecord(
            peak_mem_gib,
            peak_reserved_gib,
            peak_eval_gib,
            reserved_eval_gib,
            memory_kind,
            limit_gib,
        ),
        options,
    )
    if purpose in NOT_MEASUREMENTS:
        # A parity run's steps read the loss back each step and its first one compiles: its
        # tokens/s is no throughput, and its row carries the params of the candidate it checks
        # (search/numerics.py), so shown as one it would read as that config's throughput.
        tokens_per_s = tokens_per_s_min = tokens_per_s_max = tokens_per_s_per_gpu = mfu = None
    return {
        "number": number,
        "state": state,
        "purpose": purpose,
        "attempt": attempt,
        "retry_of": retry_of,
        "params": params,
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_min": tokens_per_s_min,
        "tokens_per_s_max": tokens_per_s_max,
        "tokens_per_s_per_gpu": tokens_per_s_per_gpu,
        "mfu": mfu,
        "peak_mem_gib": peak_mem_gib,
        "compile_s": compile_s,
        "wall_s": wall_s,
        "global_batch_tokens": global_batch,
        "memory_free_rel": free_rel,
        "tight": tight,
        "objective_value": objective_value,
        "error_class": error_class,
        "error_message": error_message,
        "worker": worker,
        "fingerprint": fingerprint,
        "started_at": started_at.isoformat() if started_at is not None else None,
        "finished_at": finished_at.isoformat() if finished_at is not None else None,
    }


def views(rows: Sequence[Row[Any]], options: HeadroomSetting | None) -> list[dict[str, Any]]:
    """The rows' list views."""
    return [list_view(row, options, orjson.loads(row[-1])) for row in rows]


def page_json(rows: Sequence[Row[Any]], options: HeadroomSetting | None) -> bytes:
    """The rows' list views as one JSON array, encoded once by orjson (a page of 500: 0.4 ms;
    FastAPI's response-model encoding of each item cost 3x the query)."""
    return orjson.dumps(views(rows, options))
