"""The compile budget of a trial (MeasureSettings.compile_budget_s).

torch.compile does its tracing, code generation and (max-autotune modes) kernel autotuning in
the first step, inside C++ and worker subprocesses that cannot be interrupted cleanly. So a
watchdog thread, armed when a compiled trial's warm-up starts, waits out the budget and, if the
first step is still running, writes the trial's result (`compile_error`: still compiling after
N s, `compile_s` that lower bound) and ends the process; the launcher then kills what is left
of its process group (inductor's compile workers included), as for any trial.

Only a trial process run by `workers.trial.main` on one process has a result file to write
(`arm` is given it); in-process callers and ranks of a multi-GPU trial run without a budget
(their timeout still applies).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from autotuner.spec import FailureClass, TrialConfig, TrialResult

# Set by workers.trial.main: writes a result where the launcher reads it.
_write: Callable[[TrialResult], None] | None = None


def arm(write: Callable[[TrialResult], None]) -> None:
    """Let watchdogs of this process write its result (the trial's entry point calls this)."""
    global _write
    _write = write


def expired(config: TrialConfig, budget_s: float) -> TrialResult:
    mode = config.knobs.compile_mode.value
    return TrialResult.failure(
        FailureClass.COMPILE_ERROR,
        f"compile budget: the first step (torch.compile mode {mode}) was still compiling "
        f"after {budget_s:.0f} s (measure.compile_budget_s); the trial was stopped",
        compile_s=budget_s,
        notes=["compile_s is a lower bound: the compile did not finish"],
    )


@contextmanager
def watch(config: TrialConfig, compiles: bool) -> Iterator[Callable[[], None]]:
    """Around the warm-up: end the process with a compile-budget result if the first step
    outlasts the budget. Yields the call that says the first step is done."""
    budget = config.measure.compile_budget_s
    write = _write
    if budget is None or not compiles or write is None or "WORLD_SIZE" in os.environ:
        yield lambda: None
        return
    done = threading.Event()

    def fire() -> None:
        if done.wait(budget):
            return
        write(expired(config, budget))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    thread = threading.Thread(target=fire, name="compile-budget", daemon=True)
    thread.start()
    try:
        yield done.set
    finally:
        done.set()
