"""What the studies list reads: a page of studies, and their trials' tallies, in two statements
however many studies (the tallies are one grouped query, not one per study, and no trial row
is loaded). Runs inside the caller's transaction (see common.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session, defer
from sqlalchemy.sql.elements import ColumnElement

from autotuner.purpose import END_CHECKS
from autotuner.storage.models import Study, Trial, TrialState

# One row of `trial_tallies`: (study id, state, trials in that state, first tries among them,
# the best objective value they measured or None).
Tally = tuple[str, str, int, int, float | None]


def study_page(
    s: Session,
    *,
    limit: int,
    status: str | None = None,
    conditions: Sequence[ColumnElement[bool]] = (),
) -> list[tuple[Study, str | None, float | None]]:
    """(study, its space's name, its recommendation's objective value), newest first. The
    space and the recommendation stay deferred: a list shows their names and values only,
    not every knob's domain. `conditions`: the list's filters (study/study_query.py)."""
    query = (
        select(
            Study,
            Study.space["name"].as_string(),
            Study.recommendation["objective_value"].as_float(),
        )
        .options(defer(Study.space), defer(Study.recommendation))
        .order_by(Study.created_at.desc(), Study.id.desc())
        .limit(limit)
    )
    if status is not None:
        query = query.where(Study.status == status)
    if conditions:
        query = query.where(*conditions)
    return [(study, name, value) for study, name, value in s.execute(query)]


def trial_tallies(s: Session, study_ids: Sequence[str]) -> list[Tally]:
    """Per study and state: how many trials, how many first tries (a retry is not a new
    launch), and the best objective value measured (end checks excluded: they re-measure the
    winner, they do not compete with it)."""
    if not study_ids:
        return []
    measured = case(
        (
            (Trial.state == TrialState.COMPLETE.value) & Trial.purpose.not_in(END_CHECKS),
            Trial.objective_value,
        )
    )
    first_tries = func.sum(case((Trial.retry_of.is_(None), 1), else_=0))
    rows = s.execute(
        select(Trial.study_id, Trial.state, func.count(), first_tries, func.max(measured))
        .where(Trial.study_id.in_(list(study_ids)))
        .group_by(Trial.study_id, Trial.state)
    )
    return [(sid, state, n, int(first or 0), best) for sid, state, n, first, best in rows]
