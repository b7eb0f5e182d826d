"""A study's wait for its cluster or GPUs (study/pause.py): said once per change, added up,
and left out of the time budget."""

from __future__ import annotations

import datetime as dt

from autotuner.executors.base import Target
from autotuner.study.budget import Budget
from autotuner.study.pause import Pause, gpus_missing


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_waits_add_up_and_each_change_is_stored_once() -> None:
    clock, stored = _Clock(), []
    pause = Pause(lambda why, s: stored.append((why, s)), paused_s=30.0, clock=clock)
    pause.update(None)  # not waiting, as before: nothing to store
    pause.update("the Ray GCS at h:6379 does not answer")
    clock.now = 5.0
    pause.update("the Ray GCS at h:6379 does not answer")  # the same: not stored again
    assert pause.seconds() == 35.0  # the ongoing wait counts
    clock.now = 7.0
    pause.update("waiting for GPUs")  # another reason: the wait goes on
    clock.now = 10.0
    pause.update(None)
    clock.now = 50.0
    assert pause.seconds() == 40.0 and pause.reason is None
    assert stored == [
        ("the Ray GCS at h:6379 does not answer", 30.0),
        ("waiting for GPUs", 37.0),
        (None, 40.0),
    ]


def test_the_time_budget_leaves_the_waits_out() -> None:
    start = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)
    now = start + dt.timedelta(minutes=10)
    budget = Budget(None, 10, start, lambda: now, paused_s=lambda: 180.0)
    assert budget.elapsed_s() == 420.0
    assert not budget.spent(launched=5, retries_pending=False)  # 3 of its 10 minutes left


def test_a_gpu_study_waits_only_for_the_gpus_it_needs() -> None:
    assert gpus_missing("cuda", 1, Target("cpu", 0)) is not None
    assert "1 of the 2" in (gpus_missing("cuda", 2, Target("cuda", 1)) or "")
    assert gpus_missing("cuda", 2, Target("cuda", 2)) is None
    assert gpus_missing("cpu", 1, Target("cpu", 0)) is None


def test_a_restarted_coordinator_clears_a_wait_that_is_over() -> None:
    """A study stored waiting when its coordinator stopped: the next one's first check with the
    cluster back clears the reason on the row (it stayed there before)."""
    clock, stored = _Clock(), []
    pause = Pause(lambda why, s: stored.append((why, s)), clock=clock)
    pause.resume("waiting for GPUs", 12.0)
    clock.now = 3.0
    pause.update(None)
    assert stored == [(None, 15.0)]
