"""Deliberate faults (`TrialConfig.fault`): the named fakes the tests use to provoke each
failure class through the real code path. Never set by the search.

- nan_loss: the loss is multiplied by NaN -> the sanity check reports `numerics`.
- hang:     the process sleeps forever after building the model -> the launcher's `timeout`.
- segfault: the process kills itself with SIGSEGV -> `crash` naming the signal.
- exit:     the process exits with status 3 and writes no result -> `crash` with stderr's tail.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def before_training(fault: str) -> None:
    """Called once the model is built, just before the first step."""
    if fault == "hang":
        print("fault=hang: sleeping forever", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
    if fault == "segfault":
        print("fault=segfault: raising SIGSEGV", file=sys.stderr, flush=True)
        signal.signal(signal.SIGSEGV, signal.SIG_DFL)  # no faulthandler: die by the signal
        os.kill(os.getpid(), signal.SIGSEGV)
    if fault == "exit":
        print("fault=exit: exiting with status 3 and no result", file=sys.stderr, flush=True)
        os._exit(3)


def poison_loss(loss, fault: str):
    """The loss, or NaN for fault nan_loss (applied inside the training step)."""
    if fault == "nan_loss":
        return loss * float("nan")
    return loss
