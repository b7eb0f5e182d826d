"""Pause Python's cyclic garbage collector while a recommendation is computed.

Computing a recommendation at 10,000 trials builds hundreds of thousands of small objects
(ORM rows, their dicts, knobs, estimates) that live until it is done. Each allocation burst
triggers the collector, and its older generations traverse every one of those objects again,
finding no garbage: 300 ms of a 1.7 s end of study (bench/results/reads_10k_cpu.md). Nothing
here makes reference cycles worth collecting early; objects without cycles are still freed by
reference counting, and the collector runs again on its usual schedule afterwards.

The collector is process-wide: the pause is counted, so overlapping pauses (threads of a
service) turn it back on only when the last one ends, and only if it was on before the first.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """The block runs with the cyclic collector off (see the module docstring)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
