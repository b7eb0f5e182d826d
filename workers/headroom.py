"""The headroom check's extra work in a measured trial (MeasureSettings.headroom_check).

A real training run does more than the timed steps: it evaluates (a forward pass in eval mode,
no autograd, often a recompile under torch.compile) and saves checkpoints (state dicts that
may be gathered or copied while the training memory is still held). Either can push a config
that fitted a 10-second trial over the edge hours into the run. After the timed repeats the
trial does both once, in its own process, so the peak it reports afterwards is the real one.

The checkpoint goes to a temporary file that is deleted at once: only the memory it takes to
write matters, not the file.
"""

from __future__ import annotations

import os
import tempfile

import torch

from workers.training import TrainStep


def eval_and_checkpoint(step: TrainStep, rank: int = 0) -> int:
    """One evaluation forward pass on a batch, then a checkpoint save; returns its bytes."""
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
    fd, path = tempfile.mkstemp(prefix=f"autotuner-ckpt-{rank}-", suffix=".pt")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"model": model.state_dict(), "optimizer": step.optimizer.state_dict()}, f)
        return os.path.getsize(path)
    finally:
        os.unlink(path)
