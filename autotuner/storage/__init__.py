"""Storage: studies and trials in Postgres (or an embedded SQLite file), schema by Alembic.

Typical use:

    db = Database.open(resolve_database_url(args.db))      # checks, then migrates to head
    with db.session() as session:                           # one transaction
        trial = TrialRepo(session).create_running(study.id, params=..., config=...)
"""

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

# Registers the flush hook that versions every study's trials (storage/trial_versions.py):
# imported here, so no session writes a trial without it.
from autotuner.storage import trial_versions  # noqa: F401  isort: skip

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
