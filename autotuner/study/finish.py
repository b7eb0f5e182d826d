"""The end of a study's search and of the study, on its runner (coordinator.StudyRunner).

`search_over` says when no new search trial is launched (the trial count, or the time the end
checks need, search/policy.py), `budget_spent` when nothing at all is. `finish` stores the
study's status with its evidence, unless it measured nothing (then it fails it with the
reason, study/ending.py); `fail` ends it with one line that says why.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

from autotuner.options import StudyOptions
from autotuner.search.end_time import duration
from autotuner.search.objective import Objective
from autotuner.search.policy import SearchPolicy
from autotuner.storage.models import StudyStatus, Trial
from autotuner.storage.session import Database
from autotuner.study import ending
from autotuner.study.budget import Budget
from autotuner.study.end_kept import KeptForEnd
from autotuner.study.events import Event
from autotuner.study.lifecycle import StudyLease
from autotuner.types import Params

OVERRUN_SAID_S = 5.0  # a study that ran this far past its --minutes says so in `stopped`


class Runner(Protocol):
    """What ending a study reads and sets on its runner (coordinator.StudyRunner)."""

    db: Database
    study_id: str
    lease: StudyLease
    policy: SearchPolicy
    end_kept: KeptForEnd
    budget: Budget
    objective: Objective
    options: StudyOptions
    max_trials: int | None
    launched: int
    retry_queue: list[tuple[Params, int]]
    done: bool
    _search_exhausted: bool

    def on_event(self, event: Event) -> None: ...


def search_over(runner: Runner) -> bool:
    """Whether the search launches no new trial (what runs next is the end's)."""
    if runner._search_exhausted:
        return True
    plan = runner.policy.time_plan
    said = plan.time_stop
    over = plan.search_over(runner.launched, runner.max_trials, runner.budget.time_left())
    if plan.time_stop is not None and said is None:
        # Said once: the search ended before the budget to leave the end its time.
        runner.on_event(Event("search_over", message=plan.time_stop))
    return over


def budget_spent(runner: Runner) -> bool:
    return runner.budget.spent(runner.launched, bool(runner.retry_queue))


def fail(runner: Runner, message: str) -> None:
    runner.lease.fail(message)
    runner.done = True
    runner.on_event(Event("done", state=StudyStatus.FAILED, message=message))


def finish(runner: Runner, status: StudyStatus) -> None:
    if status == StudyStatus.COMPLETED:
        with runner.db.read() as s:
            empty = ending.nothing_measured(s, runner.study_id)
        if empty is not None:  # every config pruned, out of memory or failing
            fail(runner, empty)
            return
    runner.lease.finish(
        status,
        objective=runner.objective,
        options=runner.options,
        evidence=functools.partial(_evidence, runner),
        kept=runner.end_kept,
    )
    runner.done = True
    runner.on_event(Event("done", state=status))


def _evidence(runner: Runner, trials: list[Trial]) -> dict[str, Any]:
    # The replay kept up with the study's ended trials replays only the rest here.
    evidence = runner.end_kept.report(runner.policy, trials)
    evidence["stopped"] = runner.policy.stop_reason(budget_spent(runner))
    time = runner.budget.time_left()
    if time is not None and time.elapsed_s > time.budget_s + OVERRUN_SAID_S:
        # `--minutes` stops launching; what was launched before it ends runs to its end.
        evidence["stopped"] += (
            f"; the study ran {duration(time.elapsed_s)} of its {duration(time.budget_s)}: "
            "trials launched before the budget ended ran past it"
        )
    return evidence
