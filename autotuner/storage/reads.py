"""The reads a study view, a best view and a trial list make, on the Core tables alone
(storage/tables.py): find a study by id, name or id prefix, a page of the newest studies, the
trials' tallies per study, the fastest measured trial.

They take a Core `Connection` (`Database.reading()`) or an ORM `Session`: both run these
statements alike, and the repositories (StudyRepo, TrialRepo) read through them too, so each
query is written once. A cold `autotuner status` or `best` on a local database imports no ORM
and no models this way (a sixth of its time). Rows come back as Core rows (the columns by
name); a caller that wants ORM objects selects the mapped class (`find_study(..., entity)`).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Row, Select, case, func, select
from sqlalchemy.sql.elements import ColumnElement

from autotuner.purpose import END_CHECKS
from autotuner.status import TrialState
from autotuner.storage.common import _LIST_HINT, StudyNotFound
from autotuner.storage.tables import studies, trials

_MIN_PREFIX = 4  # like git: shorter abbreviations are too likely to be ambiguous
# A study's columns as a view shows it: all but its options (a pydantic model, read where the
# options are: `study_options`).
STUDY_COLUMNS = tuple(c for c in studies.c if c.key != "options")
# What a list shows of a study: not its space and recommendation (only their names and values,
# `study_page`), which hold every knob's domain and the evidence.
LISTED_COLUMNS = tuple(c for c in STUDY_COLUMNS if c.key not in ("space", "recommendation"))


def newest_first() -> tuple[Any, ...]:
    return (studies.c.created_at.desc(), studies.c.id.desc())


def find_study(
    run: Callable[[Select[Any]], Sequence[Any]], key: str, entity: Any = STUDY_COLUMNS
) -> tuple[Any | None, builtins.list[Any]]:
    """The study with this id; else the newest study with this exact name; else the one study
    whose id starts with this prefix (`st-` optional), with the candidates (None and the
    candidates when ambiguous). `entity`: what is selected of each study (`STUDY_COLUMNS`, or
    the ORM class); `run`: runs a statement and gives its results (rows, or ORM objects)."""
    key = key.strip()
    if not key:
        return None, []
    query = select(*entity) if isinstance(entity, tuple) else select(entity)
    for where in (studies.c.id == key, studies.c.name == key):
        found = run(query.where(where).order_by(*newest_first()).limit(1))
        if found:
            return found[0], [found[0]]
    prefix = key if key.startswith("st-") else f"st-{key}"
    if len(prefix) - len("st-") < _MIN_PREFIX:
        return None, []
    candidates = list(run(query.where(studies.c.id.startswith(prefix, autoescape=True)).limit(6)))
    return (candidates[0] if len(candidates) == 1 else None), candidates


def require_study(
    run: Callable[[Select[Any]], Sequence[Any]], key: str, entity: Any = STUDY_COLUMNS
) -> Any:
    """Like `find_study`, but the study alone, or StudyNotFound with what to do instead."""
    found, candidates = find_study(run, key, entity)
    if found is not None:
        return found
    if len(candidates) > 1:
        shown = ", ".join(s.id for s in candidates[:5])
        raise StudyNotFound(
            f"study prefix {key!r} is ambiguous ({shown}"
            f"{', ...' if len(candidates) > 5 else ''}); give more characters of the id"
        )
    raise StudyNotFound(f"no study with id, id prefix or name {key!r}; {_LIST_HINT}")


def rows_of(c: Any) -> Callable[[Select[Any]], Sequence[Row[Any]]]:
    """`find_study`'s `run` for Core rows on a connection or a session."""
    return lambda query: c.execute(query).all()


# A study's headroom as its options JSON holds it, taken out in SQL (None: not stored, the
# default): all a trial list judges its rows by (search/headroom.py's StoredHeadroom), without
# loading the options into their model (pydantic: a tenth of a cold `autotuner trials`).
STORED_HEADROOM = studies.c.options["headroom"].as_float().label("headroom")


def study_options(c: Any, study_id: str) -> Any:
    """The study's options (`StudyOptions`: imports the model and pydantic)."""
    return c.execute(select(studies.c.options).where(studies.c.id == study_id)).scalar_one()


def study_page(
    c: Any,
    *,
    limit: int,
    status: str | None = None,
    conditions: Sequence[ColumnElement[bool]] = (),
) -> builtins.list[tuple[Row[Any], str | None, float | None]]:
    """(study, its space's name, its recommendation's objective value), newest first. The
    space and the recommendation are not read: a list shows their names and values only, not
    every knob's domain. `conditions`: the list's filters (study/study_query.py)."""
    query = (
        select(
            *LISTED_COLUMNS,
            studies.c.space["name"].as_string(),
            studies.c.recommendation["objective_value"].as_float(),
        )
        .order_by(*newest_first())
        .limit(limit)
    )
    if status is not None:
        query = query.where(studies.c.status == status)
    if conditions:
        query = query.where(*conditions)
    n = len(LISTED_COLUMNS)
    return [(row, row[n], row[n + 1]) for row in c.execute(query)]


def summary_rows(c: Any, study_ids: Sequence[str]) -> builtins.list[tuple[Any, ...]]:
    """Per study and state: (study_id, state, trials, first tries (not retries), the best
    objective value of a complete measurement (not an end check)). One grouped statement
    over `ix_trials_summary`, however many trials (no row is read)."""
    if not study_ids:
        return []
    t = trials.c
    measured = case(
        ((t.state == TrialState.COMPLETE.value) & t.purpose.not_in(END_CHECKS), t.objective_value)
    )
    first_tries = func.sum(case((t.retry_of.is_(None), 1), else_=0))
    rows = c.execute(
        select(t.study_id, t.state, func.count(), first_tries, func.max(measured))
        .where(t.study_id.in_(list(study_ids)))
        .group_by(t.study_id, t.state)
    )
    return [tuple(row) for row in rows]


def failed_with(c: Any, study_ids: Sequence[str], prefix: str) -> dict[str, int]:
    """Per study: its failed trials whose error message starts with `prefix` (those its
    cancel stopped: study/labels.py's CANCELLED_MESSAGE). Reads the failed trials only."""
    if not study_ids:
        return {}
    t = trials.c
    rows = c.execute(
        select(t.study_id, func.count())
        .where(
            t.study_id.in_(list(study_ids)),
            t.state == TrialState.FAILED.value,
            t.error_message.startswith(prefix, autoescape=True),
        )
        .group_by(t.study_id)
    )
    return {study_id: n for study_id, n in rows}


def best_trial_query(study_id: str, entity: Any = trials) -> Select[Any]:
    """The study's complete trial with the highest objective value (the earliest on a tie):
    its columns, or `entity` (the ORM class)."""
    t = trials.c
    return (
        select(entity)
        .where(
            t.study_id == study_id,
            t.state == TrialState.COMPLETE.value,
            t.objective_value.is_not(None),
        )
        .order_by(t.objective_value.desc(), t.number)
        .limit(1)
    )


def best_trial(c: Any, study_id: str) -> Row[Any] | None:
    """`best_trial_query`'s row, or None."""
    return c.execute(best_trial_query(study_id)).first()
