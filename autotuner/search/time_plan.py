"""A timed study's plan for its end, one study at a time: when the search stops, which
proposal is too late to launch, how long a trial may compile, which re-measurements are cut
and whether the end checks start (the estimates are end_time.py's, the trial costs
trial_cost.py's). The notes it keeps say why, for the study's events and its `stopped`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotuner.purpose import Purpose
from autotuner.search.end_time import (
    FLOOR_S,
    DueCheck,
    TimeLeft,
    TrialWalls,
    checks_cut,
    checks_stop,
    duration,
    needed_s,
    remeasure_cut,
    share_stop,
)
from autotuner.search.numerics import changes_numerics
from autotuner.search.progress import Progress
from autotuner.search.remeasure import Remeasure
from autotuner.search.trial_cost import TrialCosts
from autotuner.spec import CompileMode, CompileScope, Knobs
from autotuner.types import Params


class TimePlan:
    """The end's time, from the search policy's progress, re-measurement plan and walls.

    `knobs` maps a config to the knobs it runs with; `as_run` gives the params a check runs
    (search/policy.py: the numerics reference runs the candidate at the reference precision),
    which its time is read from.
    """

    def __init__(
        self,
        *,
        progress: Progress,
        remeasure: Remeasure,
        walls: TrialWalls,
        costs: TrialCosts,
        knobs: Callable[[Params], Knobs],
        as_run: Callable[[str, Params], Params],
    ) -> None:
        self.progress, self.remeasure, self.walls, self.costs = progress, remeasure, walls, costs
        self._knobs, self._as_run = knobs, as_run
        # Why the search or the re-measurements stopped for the end checks, once they did (the
        # study's events, `stopped`).
        self.time_stop: str | None = None
        self._stopped_for_checks = False  # time_stop describes the end checks
        self.checks_note: str | None = None  # why the end checks did not start (end_time.py)
        self._end_checks_decided = False
        self.remeasure_note: str | None = None
        self.late = 0  # proposals not launched for time (too_late), and why the first was not
        self._first_late: str | None = None

    def search_over(self, launched: int, max_trials: int | None, time: TimeLeft | None) -> bool:
        """Whether the search is over: converged, the trial budget less the end's reserve
        launched, or (`time`: a time budget) the time left is what the end needs. Once over
        for time it stays over: a later estimate must not start the search again."""
        if self.time_stop is not None:
            return True
        if self.remeasure.search_over(self.progress, launched, max_trials):
            return True
        if time is None:
            return False
        self.time_stop = checks_stop(time, self._checks_kept(max_trials, time), self.walls)
        self._stopped_for_checks = self.time_stop is not None
        if self.time_stop is None:
            self.time_stop = share_stop(time, reserves_share=self.remeasure.reserves_time)
        return self.time_stop is not None

    def too_late(self, knobs: Knobs, max_trials: int | None, time: TimeLeft | None) -> str | None:
        """Why not to launch this trial now: with a time budget, it is expected to end, with
        the end checks due after it, past the budget (search/trial_cost.py). None: launch it.
        A cheaper proposal may still fit; the search ends when none does."""
        if time is None:
            return None
        trial_s = self.costs.expected_s(knobs)
        keep_s = needed_s(self._checks_kept(max_trials, time))
        if time.remaining_s >= trial_s + keep_s:
            return None
        mode = knobs.compile_mode
        kind = "eager" if mode == CompileMode.NONE else f"compile {mode.value}"
        if mode != CompileMode.NONE and knobs.compile_scope == CompileScope.BLOCK:
            kind += " per block"
        why = (
            f"{knobs.precision.value} {kind} trial expected to take "
            f"{duration(trial_s)}"
            + (f", then {duration(keep_s)} for the end checks" if keep_s else "")
            + f", with {duration(time.remaining_s)} left at {time.at()}"
        )
        self.late += 1
        self._first_late = self._first_late or why
        return why

    def compile_budget_s(self, max_trials: int | None, time: TimeLeft | None) -> float | None:
        """The longest a trial launched now may compile (MeasureSettings.compile_budget_s):
        the time left less the end checks due; None without a time budget. A trial still
        compiling then could not end inside the budget (too_late let it start on its expected
        wall: an estimate, this is the limit)."""
        if time is None:
            return None
        keep_s = needed_s(self._checks_kept(max_trials, time))
        return max(FLOOR_S, time.remaining_s - keep_s)

    @property
    def late_note(self) -> str | None:
        """What the search left out for time: how many proposals, and the first."""
        if not self.late:
            return None
        return f"{self.late} proposal(s) not launched for time, the first a {self._first_late}"

    def next_remeasure(
        self, max_trials: int | None, time: TimeLeft | None = None
    ) -> tuple[dict[str, Any], str] | None:
        """The next (config, purpose) after the search: re-measurements A B A B, then (several
        GPUs) the reference on one GPU; None when done. With a time budget, a re-measurement
        that would leave the end checks too little time is not run, nor any after it."""
        planned = self.remeasure.next(self.progress, max_trials)
        if planned is None or planned[1] != Purpose.REMEASURE or time is None:
            return planned
        rerun = self.walls.due([(Purpose.REMEASURE, planned[0])])[0]
        total = len(self.remeasure.plan(self.progress.values, max_trials))
        why = remeasure_cut(
            time,
            rerun,
            self._checks_kept(max_trials, time),
            self.progress.remeasured,
            total,
            checks_said=self._stopped_for_checks,
        )
        if why is None:
            return planned
        self.remeasure.cut, self.remeasure_note = True, why
        return self.remeasure.next(self.progress, max_trials)

    def end_checks_cut(self, max_trials: int | None, time: TimeLeft | None) -> str | None:
        """Why the end checks must not start, or None to run them; asked when the first is
        due and answered once (end_time.checks_cut). A winner left unchecked says so (its
        `numerics` and `headroom` entries); the reason is in the recommendation's `stopped`."""
        if self._end_checks_decided or time is None:
            return self.checks_note
        self._end_checks_decided = True
        self.checks_note = checks_cut(time, self.checks_due(max_trials))
        return self.checks_note

    def _checks_kept(self, max_trials: int | None, time: TimeLeft) -> list[DueCheck]:
        """The end checks to keep time for: those due, unless they could not end inside the
        budget (and its grace) even if the search stopped now. Then no time is kept for them:
        the search goes on with what fits, and the end decides again for the winner it has
        then (a replayed Llama 3B study stopped after one 4.3-minute trial to keep 9 minutes
        of checks, and ran them to 13.0 min of its 10)."""
        due = self.checks_due(max_trials)
        return [] if checks_cut(time, due) is not None else due

    def checks_due(self, max_trials: int | None) -> list[DueCheck]:
        """The end checks due for the best config so far, each with its expected wall."""
        due = self.remeasure.checks_due(
            self.progress, max_trials, lambda params: changes_numerics(self._knobs(params))
        )
        # Each check keeps the params its row will carry (the candidate's, for the reference),
        # and is timed by what it runs.
        return [
            DueCheck(purpose, p, self.walls.expected_s(purpose, self._as_run(purpose, p)))
            for purpose, p in due
        ]
