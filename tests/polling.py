"""Waiting in tests: poll a condition until a deadline, never `sleep(N); assert`.

    study = wait_for(lambda: finished(study_id), 60, "the study to finish")

A fixed sleep is either too short on a loaded machine (a flaky failure) or too long everywhere
(a slow suite). `wait_for` returns as soon as the condition holds and fails with what it was
waiting for, and what it last saw, once the deadline passes. Deadlines are generous: they
bound a hang, they are not the expected time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout_s: float, what: str, every_s: float = 0.3) -> T:
    """Call `predicate` every `every_s` until it returns something truthy, and return that;
    raise AssertionError naming `what` after `timeout_s` seconds. The predicate is called
    once more after the deadline, so a slow last poll cannot make it fail early."""
    deadline = time.monotonic() + timeout_s
    while True:
        expired = time.monotonic() > deadline
        value = predicate()
        if value:
            return value
        if expired:
            raise AssertionError(
                f"timed out after {timeout_s:g} s waiting for {what} (last seen: {_short(value)})"
            )
        time.sleep(every_s)


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
