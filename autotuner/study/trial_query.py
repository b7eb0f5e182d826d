"""Which trials of a study a table shows, and in which order: sort, filter, validated.

The dashboard's trials table sorts and filters on the server, so it works the same at 10,000
trials as at 10: `TrialQuery` says what the user asked for (a column or knob to sort by, the
order, the states, the failure class, knob values), `parse_trial_query` checks it against the
study's own knobs and their domains (a bad value is a `UserError` that lists the allowed ones),
and `conditions` and `order_by` give it as clauses on Trial, which storage/trial_list.py adds
to its select. Knob values live in the `params` JSON: each is compared and sorted with the
accessor of its type in the space (an int knob compares as an integer on SQLite and Postgres
alike, and sorts 8 < 16 < 128, not as text).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.sql.elements import ColumnElement

from autotuner.inputs import UserError
from autotuner.search.screen import DOMINATED, HEADROOM
from autotuner.spec import FailureClass
from autotuner.storage.models import Trial, TrialState

# Sortable columns: the number, the state and the metrics (units in the dashboard's headers).
COLUMNS: dict[str, Any] = {
    "number": Trial.number,
    "state": Trial.state,
    "tokens_per_s": Trial.tokens_per_s,
    "tokens_per_s_per_gpu": Trial.tokens_per_s_per_gpu,
    "mfu": Trial.mfu,
    "peak_mem_gib": Trial.peak_mem_gib,
    "compile_s": Trial.compile_s,
    "wall_s": Trial.wall_s,
    "error_class": Trial.error_class,
}
ORDERS = ("asc", "desc")
STATES = tuple(s.value for s in TrialState)
# What a trial's error_class can be: a failure the worker reported, or why it was pruned.
ERROR_CLASSES = (*(c.value for c in FailureClass), DOMINATED, HEADROOM)
# Query parameters that are not knob filters (paging and the page's own).
RESERVED = ("sort", "order", "state", "error_class", "after", "offset", "limit", "format")


class InvalidQuery(UserError):
    """A sort or filter the study cannot answer; the message lists the allowed values."""


@dataclass(frozen=True)
class TrialQuery:
    sort: str = "number"
    order: str = "asc"
    states: tuple[str, ...] = ()
    error_class: str | None = None
    knobs: dict[str, Any] = field(default_factory=dict)  # knob -> typed value

    @property
    def default(self) -> bool:
        return self == TrialQuery()


def _domain_values(domain: Any) -> list[Any] | None:
    """A knob's values as the space lists them; None for an integer range (any int in it)."""
    return list(domain) if isinstance(domain, list) else None


def _typed(knob: str, text: str, domain: Any) -> Any:
    """The knob value `text` names, as the type the space stores it with."""
    values = _domain_values(domain)
    if values is None:  # an IntRange, stored as {low, high, ...}
        low, high = int(domain["low"]), int(domain["high"])
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise InvalidQuery(f"{knob}={text!r}: give an integer from {low} to {high}")
        return value
    by_text = {_text(v): v for v in values}
    if text not in by_text:
        raise InvalidQuery(f"{knob}={text!r}: choose one of {', '.join(by_text)}")
    return by_text[text]


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_trial_query(
    params: Iterable[tuple[str, str]], knob_domains: Mapping[str, Any]
) -> TrialQuery:
    """A TrialQuery from query parameters: `sort` (a column or knob), `order` (asc, desc),
    `state` (repeat it, or comma-separate, for several), `error_class`, and `<knob>=<value>`."""
    sort, order, states, error_class, knobs = "number", "asc", [], None, {}
    for key, value in params:
        if key == "sort":
            if value not in COLUMNS and value not in knob_domains:
                allowed = [*COLUMNS, *knob_domains]
                raise InvalidQuery(f"sort={value!r}: sort by one of {', '.join(allowed)}")
            sort = value
        elif key == "order":
            if value not in ORDERS:
                raise InvalidQuery(f"order={value!r}: choose asc or desc")
            order = value
        elif key == "state":
            for state in filter(None, value.split(",")):
                if state not in STATES:
                    raise InvalidQuery(f"state={state!r}: choose from {', '.join(STATES)}")
                states.append(state)
        elif key == "error_class":
            if value and value not in ERROR_CLASSES:
                raise InvalidQuery(
                    f"error_class={value!r}: choose one of {', '.join(ERROR_CLASSES)}"
                )
            error_class = value or None
        elif key in knob_domains:
            if value:
                knobs[key] = _typed(key, value, knob_domains[key])
        elif key not in RESERVED:
            raise InvalidQuery(
                f"{key}: not a filter of this study; filter by state, error_class or a knob "
                f"({', '.join(knob_domains) or 'none'}), sort with sort= and order="
            )
    return TrialQuery(sort, order, tuple(dict.fromkeys(states)), error_class, knobs)


def _knob_column(knob: str, domain: Any) -> ColumnElement[Any]:
    """The knob's value in the params JSON, with the accessor of its type."""
    element = Trial.params[knob]
    values = _domain_values(domain)
    if values is None or all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return element.as_integer()
    if all(isinstance(v, bool) for v in values):
        return element.as_boolean()
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return element.as_float()
    return element.as_string()


def conditions(q: TrialQuery, knob_domains: Mapping[str, Any]) -> list[ColumnElement[bool]]:
    """The filters of `q` as conditions on Trial, for storage.trial_list's table reads."""
    out: list[ColumnElement[bool]] = []
    if q.states:
        out.append(Trial.state.in_(q.states))
    if q.error_class is not None:
        out.append(Trial.error_class == q.error_class)
    for knob, value in q.knobs.items():
        out.append(_knob_column(knob, knob_domains[knob]) == value)
    return out


def order_by(q: TrialQuery, knob_domains: Mapping[str, Any]) -> list[ColumnElement[Any]]:
    """The order of `q` as order clauses on Trial; ties by number."""
    column = COLUMNS.get(q.sort)
    if column is None:
        column = _knob_column(q.sort, knob_domains[q.sort])
    key = column.desc() if q.order == "desc" else column.asc()
    tie = Trial.number.desc() if q.order == "desc" else Trial.number.asc()
    # Trials without the value (a failed one has no tokens/s) go last either way.
    return [key.nulls_last(), tie]
