"""Ctrl-C and SIGTERM for the verbs that run a study here (`tune`, `resume`).

A signal handler's exception is raised wherever the main thread is when the signal lands, and
Python prints and drops an exception raised inside a garbage collector's weakref callback or a
finaliser ("Exception ignored in ..."): a Ctrl-C one second into `tune` landed in SQLAlchemy's
`_collection_gced` during an import, and the study went on to its end. So the handler also
records the signal (`Stop.pending`), and the run checks it before each of the coordinator's
rounds, the first included (`Stop.check`).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any


class Stop:
    """The signal that stopped the run (SIGINT unless SIGTERM came), once one came."""

    def __init__(self) -> None:
        self.name = "SIGINT"
        self.number = int(signal.SIGINT)
        self.pending = False

    def record(self, number: int) -> None:
        self.name, self.number = signal.Signals(number).name, number
        self.pending = True

    def check(self) -> None:
        """Raise the KeyboardInterrupt a signal already raised, in case it was dropped."""
        if self.pending:
            raise KeyboardInterrupt


# This process's: a Ctrl-C during the imports and the study's setup is kept for the run.
STOP = Stop()


def _interrupt(number: int, frame: Any) -> None:
    STOP.record(number)
    raise KeyboardInterrupt


def catch_ctrl_c() -> None:
    """Ctrl-C as Python's default handler answers it, and recorded (`STOP`): installed by the
    command line's `main` before it imports its verbs."""
    signal.signal(signal.SIGINT, _interrupt)


@contextlib.contextmanager
def interruptible() -> Iterator[Stop]:
    """SIGTERM raises KeyboardInterrupt as Ctrl-C does (by default it ends the process with
    nothing stored: the study stayed `running` for good); once the first arrives, both signals
    are ignored until the block ends, so the interrupt is stored whole. Restored after, and the
    recorded signal forgotten (a test process runs verbs one after another)."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def stop(number: int, frame: Any) -> None:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        _interrupt(number, frame)

    for sig in previous:
        signal.signal(sig, stop)
    try:
        yield STOP
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        STOP.pending = False
