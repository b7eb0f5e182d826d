"""Storage: studies and trials in Postgres (or an embedded SQLite file), schema by Alembic.

Typical use:

    db = Database.open(resolve_database_url(args.db))      # checks, then migrates to head
    with db.session() as session:                           # one transaction
        trial = TrialRepo(session).create_running(study.id, params=..., config=...)

The names below are imported on first use: a module of this package (`storage.session`,
`storage.reads`) imports this one first, and a read that uses the tables alone imports no ORM.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotuner.storage.common import LeaseLost, StudyNotFound, TrialAlreadyFinished
    from autotuner.storage.models import Study, StudyStatus, Trial, TrialState
    from autotuner.storage.session import (
        Database,
        DatabaseUnavailable,
        redact,
        resolve_database_url,
        upgrade_database,
    )
    from autotuner.storage.study_repo import StudyRepo
    from autotuner.storage.trial_repo import TrialRepo

_WHERE = {
    "Database": "session",
    "DatabaseUnavailable": "session",
    "LeaseLost": "common",
    "Study": "models",
    "StudyNotFound": "common",
    "StudyRepo": "study_repo",
    "StudyStatus": "models",
    "Trial": "models",
    "TrialAlreadyFinished": "common",
    "TrialRepo": "trial_repo",
    "TrialState": "models",
    "redact": "session",
    "resolve_database_url": "session",
    "upgrade_database": "session",
}

__all__ = [
    "Database",
    "DatabaseUnavailable",
    "LeaseLost",
    "Study",
    "StudyNotFound",
    "StudyRepo",
    "StudyStatus",
    "Trial",
    "TrialAlreadyFinished",
    "TrialRepo",
    "TrialState",
    "redact",
    "resolve_database_url",
    "upgrade_database",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f"autotuner.storage.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
