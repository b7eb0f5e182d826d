"""Deliberate faults (`TrialConfig.fault`): the named fakes the tests use to provoke each
failure class through the real code path. Never set by the search.

- nan_loss: the loss is multiplied by NaN -> the sanity check reports `numerics`.
- numerics_drift: the config trains, but worse: the smallest 90% of every gradient tensor's
            entries flush to zero, as small gradients underflow in fp16 without loss scaling. The
            loss stays finite and falls, only slower, so the throughput sanity check passes;
            the loss-parity check (a parity trial against the reference precision) must catch it.
- hang:     the process sleeps forever after building the model -> the launcher's `timeout`.
- segfault: the process kills itself with SIGSEGV -> `crash` naming the signal.
- exit:     the process exits with status 3 and writes no result -> `crash` with stderr's tail.
- unsupported: the support checks refuse the config -> `unsupported` (with `fault_rank`, a
            refusal only one rank makes: the ranks must still agree without hanging).
- slow_input: every sample the loader reads takes SLOW_INPUT_S longer (a slow disk or a
            costly tokenizer): with loader or file data the training loop waits for its
            batches, which input_wait_share and the recommendation's diagnosis must show;
            loader workers (several samples read at once) hide it. No effect on synthetic data.

In a multi-GPU trial `TrialConfig.fault_rank` picks the one rank a fault strikes (None: all).
"""

from __future__ import annotations

import os
import signal
import sys
import time


def strikes(fault_rank: int | None, rank: int) -> bool:
    """Whether a fault aimed at `fault_rank` (None: every rank) strikes this rank."""
    return fault_rank is None or fault_rank == rank


def unsupported(fault: str):
    """An UnsupportedConfig for fault `unsupported` (raised with the support checks), else None."""
    if fault != "unsupported":
        return None
    from workers.errors import UnsupportedConfig

    return UnsupportedConfig("fault=unsupported: refused on purpose; use fault none")


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


SLOW_INPUT_S = 0.005  # per sample: longer than a tiny model computes one at micro-batch 64 (CPU)


class SlowInput:
    """Wraps a map-style dataset: each item costs SLOW_INPUT_S more (fault slow_input). A sleep,
    not a busy loop, so loader worker processes overlap it as they would a slow disk."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        time.sleep(SLOW_INPUT_S)
        return self.dataset[i]


def poison_loss(loss, fault: str):
    """The loss, or NaN for fault nan_loss (applied inside the training step)."""
    if fault == "nan_loss":
        return loss * float("nan")
    return loss


DRIFT_FLUSHED = 0.9  # the share of each gradient tensor numerics_drift flushes to zero


def drift_gradients(params, fault: str) -> None:
    """Fault numerics_drift (applied after backward, before clipping): zero every gradient
    entry below its tensor's median magnitude, in place."""
    if fault != "numerics_drift":
        return
    import torch

    with torch.no_grad():
        for p in params:
            if p.grad is not None and p.grad.numel() > 1:
                g = p.grad
                mags = g.abs().flatten()
                floor = mags.kthvalue(max(1, int(mags.numel() * DRIFT_FLUSHED))).values
                g.masked_fill_(g.abs() < floor, 0)
