"""What the studies list reads: a page of studies in one statement, however many studies (their
trials' tallies are TrialRepo.summary_rows: one grouped query over a covering index, no trial
row loaded). Runs inside the caller's transaction (see common.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session, defer
from sqlalchemy.sql.elements import ColumnElement

from autotuner.storage.models import Study


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
