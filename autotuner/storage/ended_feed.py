"""A reader's place in a study's ended trials: those numbered below the first one still running
and, for a reader that asks, the ones that ended after it.

An ended trial's row does not change where the dashboard's charts, the end of a study and the
live recommendation read it (its `retried` flag may, which none reads), so what a reader derives
from it can be kept: each one is read and folded in once, and a later read starts at the first
number not taken (`low`). The reader says how to read its rows from there (its own columns: the
charts' chart rows with the running tail after them, the end's evidence rows alone, the
recommendation's measured rows); the feed bounds them at the first trial still running
(`unfinished_from`) and moves past the ended ones it hands out.

The charts and the end's replay fold trials in number order (a best-so-far line, models refit
on the trials before each one), so they take nothing past the first trial running. The live
recommendation does not wait for it: a trial that ended while an earlier-numbered one still
runs is its new best now, not when that one ends. A take with `done` hands out those too, and
the feed remembers them (`seen`) until `low` passes them, so each is handed out once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from autotuner.storage.trial_rows import unfinished_from

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

R = TypeVar("R")


class EndedFeed:
    """The trials of a study that ended since the last `take`, up to the first one running
    (past it, with `done`)."""

    def __init__(self, study_id: str) -> None:
        self.study_id = study_id
        self.low = 0  # the first trial number not taken
        self.seen: set[int] = set()  # trials numbered `low` or above taken already

    def take(
        self,
        s: Session,
        read: Callable[[int, int], Sequence[R]],
        number: Callable[[R], int],
        done: Callable[[R], bool] | None = None,
    ) -> tuple[list[R], list[R]]:
        """`read(low, high)`'s rows (of trials numbered `low` or above, in number order; it may
        stop below `high`, the first trial running, or read on past it), split at `high`: the
        ended ones, taken (`low` moves past them), and the rest, left for a later take.

        With `done` (whether a row's trial has ended), `read` reads on past `high` (every row
        below it is then read), and the rows past it that `done` says have ended are taken
        too, in number order; the rest are the running ones."""
        # The bound first: a trial that ends between the two reads is past it, left for the
        # next take (or, with `done`, taken now and remembered).
        high = unfinished_from(s, self.study_id)
        rows = list(read(self.low, high))
        if self.seen:
            rows = [r for r in rows if number(r) not in self.seen]
        split = next((i for i, r in enumerate(rows) if number(r) >= high), len(rows))
        ended, rest = rows[:split], rows[split:]
        if done is None:
            if ended:
                self._move(number(ended[-1]) + 1)
            return ended, rest
        past = [r for r in rest if done(r)]
        self.seen.update(number(r) for r in past)
        self._move(high)
        return [*ended, *past], [r for r in rest if not done(r)]

    def _move(self, low: int) -> None:
        # The trials below `low` are read no more: nothing of them is to be remembered.
        if low > self.low:
            self.low = low
            if self.seen:
                self.seen = {n for n in self.seen if n >= low}
