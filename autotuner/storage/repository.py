"""Repositories: the queries and state changes on studies and trials, over a caller's Session.

Each method runs inside the caller's `Database.session()` transaction and never commits itself,
so one state change is one transaction. State changes that can race (taking a study's lease,
numbering trials, finishing a trial, marking trials lost) are conditional UPDATEs or row locks,
correct with several coordinators on one Postgres database; on SQLite every transaction takes
the write lock at BEGIN (see session.configure_sqlite), which serialises them.

The code lives in three modules: common.py (the exceptions, the database clock and the UPDATE
helpers), study_repo.py (StudyRepo) and trial_repo.py (TrialRepo); import from those. This
module names them in one place only for the study coordinator, the study lease and `tune`,
which import them from here until those modules move to the three.
"""

from autotuner.storage.common import (
    LeaseLost,
    StudyNotFound,
    TrialAlreadyFinished,
    db_now,
)
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo

__all__ = [
    "LeaseLost",
    "StudyNotFound",
    "StudyRepo",
    "TrialAlreadyFinished",
    "TrialRepo",
    "db_now",
]
