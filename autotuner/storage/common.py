"""What the study and trial repositories share: their exceptions, the database clock, and the
small helpers for conditional UPDATEs.

The repositories (study_repo.StudyRepo, trial_repo.TrialRepo) run inside the caller's
`Database.session()` transaction and never commit themselves, so one state change is one
transaction. State changes that can race (taking a study's lease, numbering trials, finishing
a trial, marking trials lost) are conditional UPDATEs or row locks, correct with several
coordinators on one Postgres database; on SQLite every transaction takes the write lock at
BEGIN (see session.configure_sqlite), which serialises them.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import CursorResult, func, select

from autotuner.types import utcnow

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

_LIST_HINT = "run `autotuner status` to list studies"


class StudyNotFound(LookupError):
    """No study matches the id, id prefix or name given; the message says how to find one."""


class LeaseLost(RuntimeError):
    """A coordinator wrote to a study whose lease it no longer holds; nothing was written."""


def db_now(session: Session) -> dt.datetime:
    """The database's clock (Postgres `now()`), so that every coordinator compares lease and
    heartbeat times on one clock, whatever its own says. SQLite is a local file: its clock is
    this machine's."""
    if session.get_bind().dialect.name == "postgresql":
        value = session.scalar(select(func.now()))
        if value is not None:
            return value.astimezone(dt.UTC)
    return utcnow()


class TrialAlreadyFinished(RuntimeError):
    """A trial can be finished (or marked lost) once: a second result is refused, not recorded."""


def _fits(field: str, value: str | None, limit: int, remedy: str) -> None:
    """Refuse a value longer than its column on every backend (SQLite would silently keep it,
    Postgres would fail mid-transaction with a bare "value too long")."""
    if value is not None and len(value) > limit:
        raise ValueError(
            f"{field} {value[:40]!r}... is {len(value)} characters, over {limit}; {remedy}"
        )


def _set(obj: Any, **values: Any) -> None:
    """Mirror values already written by an UPDATE onto a loaded object, without marking it dirty."""
    from sqlalchemy.orm.attributes import set_committed_value

    for key, value in values.items():
        set_committed_value(obj, key, value)


def _rowcount(result: Any) -> int:
    return cast(CursorResult[Any], result).rowcount
