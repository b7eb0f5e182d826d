"""The headroom check's extra work in a measured trial (MeasureSettings.headroom_check).

A real training run does more than the timed steps: it evaluates (a forward pass in eval mode,
no autograd, often a recompile under torch.compile) and saves checkpoints (state dicts that
may be gathered or copied while the training memory is still held). Either can push a config
that fitted a 10-second trial over the edge hours into the run. After the timed repeats the
trial does both once, in its own process, so the peak it reports afterwards is the real one.

The checkpoint is serialized by `torch.save` as a real save is, every tensor copied off the
GPU while the training memory is held, but its bytes go to a sink that only counts them: what
the check measures is the memory the save takes, not the disk. Written to the H200 machine's
disk, a Llama 3B checkpoint (36.7 GB with AdamW's moments) made the check 141 s longer than its
trial (bench/results/h200_session_20261201), time a study with a budget needs for its search.
Nor does the save compute the archive's CRC-32 checksums: a pass over every byte on the host
(0.55 s a GiB on this project's CPU, where the counted save of that GiB then takes 1 ms;
about 20 s of a Llama 3B check's) that allocates nothing on the GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

import torch

from workers.training import TrainStep


class CountingSink:
    """A write-only file for torch.save that counts the bytes; `keep` (a test's buffer) gets
    them too."""

    def __init__(self, keep: BinaryIO | None = None) -> None:
        self.size = 0
        self.keep = keep

    def write(self, data: bytes, /) -> int:
        n = memoryview(data).nbytes
        if self.keep is not None:
            self.keep.write(data)
        self.size += n
        return n

    def flush(self) -> None:
        pass


def eval_and_checkpoint(
    step: TrainStep,
    keep: BinaryIO | None = None,
    mark: Callable[[str], None] = lambda phase: None,
) -> int:
    """One evaluation forward pass on a batch, then a checkpoint save; returns its bytes.
    `mark` ends a phase of the trial's clock (phases.Clock.mark): `eval`, then `checkpoint`,
    so a study can tell an evaluation's recompile from the save's copy off the GPU."""
    x, y = step.batches.next()
    model = step.model
    model.eval()
    try:
        with torch.no_grad(), step.autocast():
            if step.cudagraphs:
                torch.compiler.cudagraph_mark_step_begin()
            loss = model(x, y)
        float(loss)  # waits for the pass: its memory is in the peak before the save starts
    finally:
        model.train()
    mark("eval")
    sink = CountingSink(keep)
    with _no_crc32():
        torch.save({"model": model.state_dict(), "optimizer": step.optimizer.state_dict()}, sink)
    mark("checkpoint")
    return sink.size


@contextlib.contextmanager
def _no_crc32() -> Iterator[None]:
    """torch.save without the zip records' CRC-32 (torch >= 2.6 lets it be turned off; an
    older torch computes it, which costs time, not memory)."""
    get = getattr(torch.serialization, "get_crc32_options", None)
    set_ = getattr(torch.serialization, "set_crc32_options", None)
    if get is None or set_ is None:
        yield
        return
    before = get()
    set_(False)
    try:
        yield
    finally:
        set_(before)
