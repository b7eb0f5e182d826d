"""A reader's place in a study's ended trials: those numbered below the first one still running.

An ended trial's row does not change where the dashboard's charts and the end of a study read it
(its `retried` flag may, which neither reads), so what a reader derives from it can be kept: each
one is read and folded in once, in number order, and a later read starts at the first number not
taken (`low`). The reader says how to read its rows from there (its own columns: the charts'
chart rows with the running tail after them, the end's evidence rows alone); the feed bounds them
at the first trial still running (`unfinished_from`) and moves past the ended ones it hands out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from autotuner.storage.trial_rows import unfinished_from

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

R = TypeVar("R")


class EndedFeed:
    """The trials of a study that ended since the last `take`, up to the first one running."""

    def __init__(self, study_id: str) -> None:
        self.study_id = study_id
        self.low = 0  # the first trial number not taken

    def take(
        self,
        s: Session,
        read: Callable[[int, int], Sequence[R]],
        number: Callable[[R], int],
    ) -> tuple[list[R], list[R]]:
        """`read(low, high)`'s rows (of trials numbered `low` or above, in number order; it may
        stop below `high`, the first trial running, or read on past it), split at `high`: the
        ended ones, taken (`low` moves past them), and the rest, left for a later take."""
        high = unfinished_from(s, self.study_id)
        rows = list(read(self.low, high))
        split = next((i for i, r in enumerate(rows) if number(r) >= high), len(rows))
        ended, rest = rows[:split], rows[split:]
        if ended:
            self.low = number(ended[-1]) + 1
        return ended, rest
