"""Which of a study's trials are its newest: what `autotuner trials` shows without --all. Apart
from the trial lists (study/trial_list.py imports SQLAlchemy's tables), so that the CLI on the
service (`--server`), which reads over HTTP, imports no SQLAlchemy for it."""

from __future__ import annotations


def after_last(total: int, last: int | None) -> int | None:
    """The `after` that pages to the `last` newest of a study's `total` trials (None: every
    one): trial numbers are 0..total-1 with no gap, so those numbered above total - last - 1."""
    return None if last is None or total <= last else total - last - 1
