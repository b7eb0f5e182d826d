"""Trials lost to our side: what a loss costs the config, and where that stops.

A trial is `lost` when something other than its config ended it: the coordinator or service
that ran it died (its row is found running at takeover, `lifecycle.StudyLease.take`), or the
Ray cluster failed under it (a raylet, the GCS, the node it ran on: `Completed.lost`). Such a
trial says nothing about its config, so it is run again *without* spending the config's one
retry: the re-run has the lost trial's attempt number (`TrialBook.dispatch`), and it does not
count against the trial budget (it is a row with `retry_of`). Only a failure of the config's
own process (`timeout`, `crash`, `infra` from the worker) spends the retry.

The bound: a config whose trial is lost `LOST_LIMIT` times in a row is then treated as a crash
of the config (a trial that takes its node or the service down with it looks exactly like
that, and would otherwise be re-run forever); that loss is stored as `failed`/`crash` with the
reason, and the usual retry rule applies from there.
"""

from __future__ import annotations

from collections.abc import Callable

from autotuner.purpose import END_CHECKS, Purpose
from autotuner.spec import FailureClass
from autotuner.storage.models import Trial, TrialState
from autotuner.storage.trial_repo import INTERRUPTED

# Three losses in a row: two coordinator crashes during one config (the issue that led here)
# are re-run, a config that kills its node every time it runs stops after three.
LOST_LIMIT = 3


def rerun_allowed(purpose: str) -> bool:
    """Whether a lost trial of this purpose is run again. A re-measurement and an end check are
    not (the endgame plans its own next step, search/remeasure.py, search/numerics.py), as for
    their failures."""
    return purpose != Purpose.REMEASURE and purpose not in END_CHECKS


def lost_in_a_row(trial: Trial, by_number: Callable[[int], Trial | None]) -> int:
    """How many times in a row this trial's config was lost, counting `trial` itself (lost or
    about to be): its chain of re-runs back through `retry_of` while those were lost too."""
    streak, row = 1, trial
    while row.retry_of is not None:
        previous = by_number(row.retry_of)
        if previous is None or previous.state != TrialState.LOST.value:
            break
        # Cancelled when its study was interrupted: the user stopped it, nothing crashed.
        if previous.error_class == INTERRUPTED:
            break
        streak, row = streak + 1, previous
    return streak


def crash_loop_message(streak: int, why: str | None) -> str:
    """The reason stored on the loss that is charged to the config as a crash."""
    return (
        f"lost {streak} times in a row (the service, its node or the cluster stopped each "
        f"time this config ran): treated as a crash of the config; last: {why or 'lost'}"
    )[:2000]


def charge_crash_loops(lost: list[Trial], by_number: Callable[[int], Trial | None]) -> None:
    """At takeover: a freshly lost trial that completes a streak of LOST_LIMIT becomes a
    `crash` of its config (state failed, with the reason), so the retry rule decides what
    follows instead of another free re-run."""
    for trial in lost:
        streak = lost_in_a_row(trial, by_number)
        if streak >= LOST_LIMIT:
            trial.state = TrialState.FAILED.value
            trial.error_class = FailureClass.CRASH.value
            trial.error_message = crash_loop_message(streak, trial.error_message)
