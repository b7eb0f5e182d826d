"""Where a study stands as it is resumed: what it measured, what runs again, what budget is left.

`tune` and `resume` say it in one line before the first new trial, and start the progress bar
where the study is: its launched trials, less those that will run again (an interrupted trial,
or a failed one owed its retry), which count once their re-run ends, as during the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotuner.storage.models import TrialState
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.lost import rerun_allowed
from autotuner.study.trials import retried_once


@dataclass(frozen=True)
class Standing:
    measured: int  # trials that completed with a measurement
    rerun: int  # trials that will run again: interrupted (lost), or failed and owed a retry
    done: int  # trials of the budget already spent and settled: the progress bar's start
    trials_left: int | None  # of max_trials; None without a trial budget
    minutes_left: float | None  # of max_minutes; None without a time budget
    best_tokens_per_s: float  # the fastest measured so far (0.0: none, or another objective)


def standing(db: Database, view: dict[str, Any]) -> Standing:
    """The study of `view` (study/views.py `study_view`, as `resume_study` returns it)."""
    rerun = owed_reruns(db, view["id"])
    launched = view["trials_launched"]
    trials_left = minutes_left = None
    if view.get("max_trials"):
        trials_left = max(view["max_trials"] - launched, 0)
    if view.get("max_minutes"):
        minutes_left = max(view["max_minutes"] - (view.get("minutes_used") or 0.0), 0.0)
    return Standing(
        measured=view["trial_counts"].get(TrialState.COMPLETE.value, 0),
        rerun=rerun,
        done=max(launched - rerun, 0),
        trials_left=trials_left,
        minutes_left=minutes_left,
        best_tokens_per_s=float(
            (view.get("best_value") or 0.0) if view["objective"] == "tokens_per_s" else 0.0
        ),
    )


def owed_reruns(db: Database, study_id: str) -> int:
    """Trials the restarted coordinator runs again (trials.history's `retries`): lost ones it
    may re-run and failed ones owed their retry, where no re-run was dispatched yet."""
    with db.read() as s:
        rows = TrialRepo(s).unretried_failures(study_id)
    return sum(
        1
        for state, purpose, attempt in rows
        if (state == TrialState.LOST.value and rerun_allowed(purpose))
        or (state == TrialState.FAILED.value and retried_once(purpose, attempt))
    )
