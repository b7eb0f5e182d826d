"""The end of a study: when the search stops, and what is re-measured before recommending.

The search stops once it has converged (progress.py), once the trial budget less the
re-measure reserve is launched, or, with a time budget, when the time left is what the end
needs (end_time.py: the end checks' expected walls, or `SEARCH_TIME_SHARE` of it). The top
candidates are then re-measured in fresh processes, interleaved A B A B, so a lucky first
measurement does not win on noise. A multi-GPU study ends with one more trial, the reference:
its best config on one GPU, so the recommendation can state its scaling efficiency. A space
that holds a numerics-changing precision (fp16, tf32, fp8) keeps two more trials for the
numerics check of the winner (search/numerics.py: two parity trials), which the coordinator
runs last; a second candidate's check runs only where the budget still has room. A study with
a memory headroom (options.headroom > 0) keeps one more for the winner's headroom check
(search/headroom_check.py), run before the numerics check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotuner.purpose import Purpose
from autotuner.search.end_time import HEADROOM_AND_PARITY
from autotuner.search.numerics import PARITY_RESERVE
from autotuner.search.progress import Progress
from autotuner.types import Params

HEADROOM_RESERVE = 1  # one headroom check of the winner (search/headroom_check.py)
REMEASURE_SHARE = 5  # at most 1/5 of a trial budget goes to re-measurement


class Remeasure:
    """The re-measure reserve and plan of one study."""

    def __init__(
        self,
        *,
        top: int,
        rounds: int,
        reference: bool = False,
        parity: bool = False,
        headroom: bool = False,
    ) -> None:
        self.top, self.rounds = top, rounds
        self.reference = reference  # end with the best config on one GPU (multi-GPU studies)
        self.parity = parity  # keep room for the numerics check (numerics-changing precisions)
        self.headroom = headroom  # keep room for the headroom check (options.headroom > 0)
        # Set when the time left is the end checks' (end_time.remeasure_cut): no more
        # re-measurements. Not stored: a restart decides again, on less time.
        self.cut = False

    def reserve(self, max_trials: int | None) -> int:
        """Trials of the budget kept for the end: re-measurements, the reference, the numerics
        and headroom checks."""
        return (
            self._remeasure_reserve(max_trials)
            + self._reference_reserve(max_trials)
            + self._parity_reserve(max_trials)
            + self._headroom_reserve(max_trials)
        )

    def _headroom_reserve(self, max_trials: int | None) -> int:
        # Not in a budget of four or fewer trials: those are for the search.
        return HEADROOM_RESERVE if self.headroom and (max_trials is None or max_trials > 4) else 0

    def _parity_reserve(self, max_trials: int | None) -> int:
        # Not in a budget of four or fewer trials: those are for the search. With a headroom
        # check the candidate's parity steps run inside it: only the reference is a trial more.
        if not self.parity or (max_trials is not None and max_trials <= 4):
            return 0
        return PARITY_RESERVE - 1 if self._headroom_reserve(max_trials) else PARITY_RESERVE

    def _remeasure_reserve(self, max_trials: int | None) -> int:
        want = self.top * self.rounds
        if want <= 0 or self.top < 1:
            return 0
        if max_trials is None:
            return want
        room = (max_trials // REMEASURE_SHARE) // self.top * self.top
        return max(0, min(want, room))

    def _reference_reserve(self, max_trials: int | None) -> int:
        # Not in a budget of two or fewer trials: those are for the search.
        return 1 if self.reference and (max_trials is None or max_trials > 2) else 0

    def plan(
        self, values: dict[str, tuple[dict[str, Any], float]], max_trials: int | None
    ) -> list[dict[str, Any]]:
        """The configs to re-measure in order: the best `top` by value, A B A B ..."""
        reserve = self._remeasure_reserve(max_trials)
        ranked = sorted(values.values(), key=lambda pv: pv[1], reverse=True)
        top = [params for params, _ in ranked[: self.top]]
        if not top:
            return []
        rounds = max(1, reserve // len(top)) if reserve else 0
        return [p for _ in range(rounds) for p in top][:reserve]

    def next(self, progress: Progress, max_trials: int | None) -> tuple[dict[str, Any], str] | None:
        """The next (config, purpose) to run after the search, or None when done: each
        re-measurement ("remeasure"), then the reference ("reference") of the best config."""
        plan = self.plan(progress.values, max_trials)
        if progress.remeasured < len(plan) and not self.cut:
            return plan[progress.remeasured], Purpose.REMEASURE
        if self._reference_reserve(max_trials) and not progress.referenced and progress.values:
            best = max(progress.values.values(), key=lambda pv: pv[1])[0]
            return best, Purpose.REFERENCE
        return None

    def checks_due(
        self, progress: Progress, max_trials: int | None, changes_numerics: Callable[[Params], bool]
    ) -> list[tuple[str, Params]]:
        """The end checks the study would run after its re-measurements if the search ended
        now, as (purpose, params), for its best config so far: the one-GPU reference, the
        headroom check, and the two numerics parity trials where its precision changes
        numerics (a second candidate's checks run only if the first fails: not counted)."""
        if not progress.values:
            return []
        best = max(progress.values.values(), key=lambda pv: pv[1])[0]
        due: list[tuple[str, Params]] = []
        if self._reference_reserve(max_trials) and not progress.referenced:
            due.append((Purpose.REFERENCE, best))
        headroom = bool(self._headroom_reserve(max_trials))
        if self._parity_reserve(max_trials) and changes_numerics(best):
            # The reference first, then the candidate's parity steps: inside its headroom check
            # when there is one (study/endgame.py), else a parity trial of their own.
            due.append((Purpose.PARITY_REFERENCE, best))
            due.append((HEADROOM_AND_PARITY, best) if headroom else (Purpose.PARITY, best))
        elif headroom:
            due.append((Purpose.HEADROOM, best))
        return due

    @property
    def reserves_time(self) -> bool:
        """Whether anything comes after the search (re-measurements or end checks)."""
        return self._remeasure_reserve(None) > 0 or self.parity or self.headroom

    def search_over(self, progress: Progress, launched: int, max_trials: int | None) -> bool:
        """Whether the search is over by convergence or the trial budget (the time budget is
        end_time.py's)."""
        if progress.converged():
            return True
        return max_trials is not None and launched >= max_trials - self.reserve(max_trials)


def stop_reason(progress: Progress, budget_spent: bool) -> str:
    """Why the study stopped, as the evidence reports it."""
    if progress.converged():
        return (
            f"converged: no improvement beyond noise (±{progress.noise_rel():.1%}) in the last "
            f"{progress.since_improvement} trials"
        )
    return "budget spent" if budget_spent else "search space exhausted"
