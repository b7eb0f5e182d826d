"""What the trial lists read: pages of a study's trials, a sorted and filtered table's rows and
count, the charts' columns of every trial; one statement each, whatever the study's size.
study/trial_list.py turns the rows into views, study/trial_reads.py makes the reads. Runs
inside the caller's transaction (see common.py), on a session or a Core connection (`s`).

A page of 500 trials read as ORM objects spent more time building them (identity map, instance
state, a decoded `params` dict per row) than Postgres spent finding the rows; so lists select
the columns they show (`COLUMNS`) and get tuples. `params` comes as the JSON text the database
holds, for orjson to decode: psycopg's JSONB loader (the standard library's json, one call per
row) cost more than the rest of the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, Text, cast, func, select
from sqlalchemy.sql.elements import ColumnElement

from autotuner.storage.tables import MEASUREMENT_COLUMNS, trials

# The table's columns by name (the ORM's t.x): a list reads them on a Core connection
# (Database.reading(), no ORM imported) or on a session alike.
t = trials.c

# What a list reads of a trial, in the order study/trial_list.list_view unpacks it: the view's
# own columns, then the memory record's (whether it is tight), then `params` as JSON text.
SHOWN = (
    "number",
    "state",
    "purpose",
    "attempt",
    "retry_of",
    *MEASUREMENT_COLUMNS,
    "global_batch_tokens",
    "objective_value",
    "error_class",
    "error_message",
    "worker",
    "fingerprint",
    "started_at",
    "finished_at",
    "peak_reserved_gib",
    "peak_mem_with_eval_ckpt_gib",
    "peak_reserved_with_eval_ckpt_gib",
    "memory_kind",
    "memory_limit_gib",
)
# The JSON text: JSONB's output on Postgres, the stored text on SQLite.
PARAMS_JSON = cast(t.params, Text).label("params_json")
COLUMNS = (*(getattr(t, name) for name in SHOWN), PARAMS_JSON)


def list_rows(s: Any, study_id: str, *, after: int | None, limit: int | None) -> Sequence[Row[Any]]:
    """A study's trials in number order, keyset-paged (numbered above `after`, at most
    `limit`): one statement over the (study_id, number) index, `COLUMNS` only."""
    query = select(*COLUMNS).where(t.study_id == study_id)
    if after is not None:
        query = query.where(t.number > after)
    query = query.order_by(t.number)
    if limit is not None:
        query = query.limit(limit)
    return s.execute(query).all()


def query_rows(
    s: Any,
    study_id: str,
    *,
    conditions: Sequence[ColumnElement[bool]],
    order_by: Sequence[ColumnElement[Any]],
    offset: int,
    limit: int | None,
) -> Sequence[Row[Any]]:
    """`COLUMNS` of the study's trials that meet `conditions`, in the order `order_by`, `limit`
    of them from `offset` (a table's query: study/trial_query.py gives both)."""
    query = (
        select(*COLUMNS)
        .where(t.study_id == study_id, *conditions)
        .order_by(*order_by)
        .offset(offset)
    )
    if limit is not None:
        query = query.limit(limit)
    return s.execute(query).all()


def query_count(s: Any, study_id: str, *, conditions: Sequence[ColumnElement[bool]]) -> int:
    """How many of the study's trials meet `conditions` (a table's pages in all)."""
    count = select(func.count()).select_from(trials).where(t.study_id == study_id, *conditions)
    return s.scalar(count) or 0


def chart_rows(
    s: Any, study_id: str, names: Sequence[str], knobs: Sequence[str], low: int = 0
) -> Sequence[Row[*tuple[Any, ...]]]:
    """Every trial of the study numbered `low` or above, in number order: its columns `names`,
    then each of `knobs`' value as text, taken out of the params in SQL (no JSON record
    decoded). A range of the (study, number) index."""
    values = [t.params[k].as_string() for k in knobs]
    query = (
        select(*(getattr(t, name) for name in names), *values)
        .where(t.study_id == study_id, t.number >= low)
        .order_by(t.number)
    )
    return s.execute(query).all()
