"""What must hold for a study after any fault, checked from the database alone.

- every trial number appears once, from 0 with no gap;
- a trial is retried at most once, and only a failed or lost one;
- a finished study has no `running` row;
- the user's budget is never exceeded: launched trials that are not retries (re-measurements
  included: they are part of the budget) are at most max_trials; pruned trials cost nothing.
"""

from __future__ import annotations

from collections import Counter

from autotuner.storage.models import StudyStatus, TrialState
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo

FINISHED = (StudyStatus.COMPLETED, StudyStatus.CANCELLED, StudyStatus.FAILED)


def check_invariants(db: Database, study_id: str, *, max_trials: int) -> None:
    with db.read() as s:
        study = StudyRepo(s).require(study_id)
        trials = TrialRepo(s).list(study_id)
    numbers = [t.number for t in trials]
    assert numbers == list(range(len(trials))), f"trial numbers not 0..n-1: {numbers}"
    retries = Counter(t.retry_of for t in trials if t.retry_of is not None)
    assert all(n == 1 for n in retries.values()), f"a trial retried twice: {retries}"
    by_number = {t.number: t for t in trials}
    for original in retries:
        assert by_number[original].state in (TrialState.FAILED, TrialState.LOST), (
            f"trial {original} was retried but is {by_number[original].state}"
        )
        assert by_number[original].retried
    if study.status in FINISHED:
        running = [t.number for t in trials if t.state == TrialState.RUNNING]
        assert not running, f"study {study.status} with running trials {running}"
    first_attempts = [t for t in trials if t.state != TrialState.PRUNED and t.retry_of is None]
    assert len(first_attempts) <= max_trials, (
        f"{len(first_attempts)} first attempts for a budget of {max_trials}"
    )
