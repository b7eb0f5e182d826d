"""Time for the end of a study: what its end checks will take, from the study's own trials.

With a time budget (`--minutes`), the end checks (the winner's headroom check, its numerics
check: two parity trials, a multi-GPU study's one-GPU reference) must run inside it, after the
search. Each re-runs a config the study measured, so each is expected to take what that
config's trial took: its wall, process start and compile included, at least FLOOR_S. A parity
trial trains PARITY_STEPS steps in place of the warm-up and the timed repeats, so its estimate
swaps those phases for PARITY_STEPS x the config's step time.

The search stops launching once the time left is under the checks' sum (x MARGIN, for the
dispatch and the result between them) plus one search trial (a trial launched now delays the
checks by its length: they start once every search trial has reported). Re-measurements,
which run before the checks, are cut short when the next one would leave the checks less than
that. Whichever comes first, the search also stops at SEARCH_TIME_SHARE of the budget, as it
did before, so the re-measurements have time too.

Why the measured walls and not only a share of the budget: in an 8-minute Llama 3B study on
the H200, trials took 80-190 s (compile 55-167 s); the last 15% (72 s) could hold none of them,
and the fp8 winner's numerics check never ran (bench/results/tune_llama_h200/).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Any

from autotuner.search.numerics import PARITY_STEPS
from autotuner.search.progress import (
    HEADROOM_CHECK,
    PARITY,
    PARITY_REFERENCE,
    REFERENCE,
)
from autotuner.spec import TrialResult, canonical_params

Params = dict[str, Any]
# The least a trial costs: the fastest measured, a GPT-2 124M trial forked from the
# pre-imported worker on the H200 (README, "Cheaper trials"), is 2 s.
FLOOR_S = 2.0
MARGIN = 1.2  # the checks' sum, plus dispatch, polling and storing between them
SEARCH_TIME_SHARE = 0.85  # with no end check due, the search stops here and re-measuring begins
_MEASURED = ("seed", "search", "remeasure")  # full trials of a candidate config
_REPLACED_BY_PARITY = ("warmup", "measure", "checks")  # phases a parity trial does not run


@dataclass(frozen=True)
class TimeLeft:
    """Where a study stands against its time budget."""

    elapsed_s: float
    budget_s: float

    @property
    def remaining_s(self) -> float:
        return max(0.0, self.budget_s - self.elapsed_s)

    @property
    def share(self) -> float:
        return self.elapsed_s / self.budget_s if self.budget_s > 0 else 1.0

    def at(self) -> str:
        return f"{duration(self.elapsed_s)} of {duration(self.budget_s)}"


def duration(seconds: float) -> str:
    """`45 s` or `3.2 min`: the unit a reader of that length thinks in."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


@dataclass(frozen=True)
class DueCheck:
    """An end check still to run, and how long it is expected to take."""

    purpose: str
    params: Params
    expected_s: float


_NAMES = {
    REFERENCE: "the one-GPU reference",
    HEADROOM_CHECK: "the headroom check",
    PARITY_REFERENCE: "the numerics check's reference",
    PARITY: "the numerics check",
}


def describe(checks: list[DueCheck]) -> str:
    """`the headroom check 3.2 min, the numerics check's reference 4.1 min, ...`."""
    return ", ".join(f"{_NAMES.get(c.purpose, c.purpose)} {duration(c.expected_s)}" for c in checks)


class TrialWalls:
    """What each measured config's trial took, and the study's typical search trial."""

    def __init__(self) -> None:
        self._longest: dict[str, TrialResult] = {}  # canonical params -> its longest trial
        self._search_walls: list[float] = []

    def observe(self, params: Params, result: TrialResult, purpose: str) -> None:
        if purpose not in _MEASURED or not result.wall_s:
            return
        if purpose != "remeasure":
            self._search_walls.append(result.wall_s)
        key = canonical_params(params)
        known = self._longest.get(key)
        # The longest: the cold compile, not a re-run's warm one (an estimate may be long,
        # never short: a short one is a check that does not run).
        if known is None or result.wall_s > (known.wall_s or 0.0):
            self._longest[key] = result

    def search_trial_s(self) -> float:
        """A search trial launched now: the median wall of the study's search trials."""
        return max(FLOOR_S, median(self._search_walls)) if self._search_walls else FLOOR_S

    def rerun_s(self, params: Params) -> float:
        """A re-run of a measured config (re-measurement, headroom check, reference)."""
        known = self._longest.get(canonical_params(params))
        return max(FLOOR_S, known.wall_s or 0.0) if known is not None else self.search_trial_s()

    def parity_s(self, params: Params) -> float:
        """A parity trial of the config (or of its knobs at the reference precision): its
        start, build and compile as measured, then PARITY_STEPS steps at its step time."""
        known = self._longest.get(canonical_params(params))
        if known is None or not known.wall_s:
            return self.search_trial_s()
        phases = known.phases_s or {}
        skipped = sum(phases.get(p, 0.0) for p in _REPLACED_BY_PARITY)
        steps = PARITY_STEPS * (known.step_time_s or 0.0)
        return max(FLOOR_S, known.wall_s - skipped + steps)

    def due(self, checks: list[tuple[str, Params]]) -> list[DueCheck]:
        """Each (purpose, params) with its expected seconds."""
        return [
            DueCheck(
                purpose,
                params,
                self.parity_s(params)
                if purpose in (PARITY, PARITY_REFERENCE)
                else self.rerun_s(params),
            )
            for purpose, params in checks
        ]


def needed_s(checks: list[DueCheck]) -> float:
    """The time to keep for these checks."""
    return MARGIN * sum(c.expected_s for c in checks)


def search_stop(
    time: TimeLeft, checks: list[DueCheck], walls: TrialWalls, *, reserves_share: bool
) -> str | None:
    """Why the search must stop now to leave time for the end of the study, or None."""
    if checks:
        trial_s = walls.search_trial_s()
        keep_s = needed_s(checks)
        if time.remaining_s < keep_s + trial_s:
            return (
                f"search stopped at {time.at()} to leave time for the end checks "
                f"({describe(checks)}; {duration(keep_s)} with a {MARGIN:.1f}x margin, from "
                f"the measured walls of the configs they re-run, compile included), as a "
                f"search trial takes {duration(trial_s)}"
            )
    if reserves_share and time.share >= SEARCH_TIME_SHARE:
        return (
            f"search stopped at {time.at()} ({SEARCH_TIME_SHARE:.0%} of the time budget): the "
            "rest is for re-measuring the top candidates and the end checks"
        )
    return None


def remeasure_cut(
    time: TimeLeft, rerun: DueCheck, checks: list[DueCheck], done: int, planned: int
) -> str | None:
    """Why the next re-measurement must not run (the end checks would not fit after it), or
    None to run it."""
    if not checks:
        return None
    keep_s = needed_s(checks)
    if time.remaining_s >= rerun.expected_s + keep_s:
        return None
    return (
        f"re-measurement stopped after {done} of {planned} at {time.at()} to leave time for "
        f"the end checks ({describe(checks)}; {duration(keep_s)} with a {MARGIN:.1f}x "
        f"margin); the next re-measurement takes {duration(rerun.expected_s)}"
    )
