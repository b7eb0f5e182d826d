"""One optimizer step: `grad_accum` micro-batches forward/backward, clip, AdamW, zero grads.

This is the hot path. It never synchronises with the device (no .item(), no printing): the
timing loop in workers/measure.py syncs only at the edges of a repeat. The one exception is
inherent to fp16 with a non-fused optimizer: GradScaler reads its inf flag on the host every
step, and that cost is real, so it is measured.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.nn as nn

from autotuner.spec import Optimizer
from workers import faults

LEARNING_RATE = 3e-4
GRAD_CLIP = 1.0


def build_optimizer(model: nn.Module, kind: Optimizer) -> torch.optim.Optimizer:
    """AdamW as nanoGPT sets it up: decay on matrices only; foreach or fused kernels, or
    torchao's 8-bit moments."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    if kind == Optimizer.ADAMW_8BIT:
        # One compiled kernel per parameter shape (dequantise, update in fp32, requantise);
        # tensors under 4096 values (norm weights) keep fp32 moments (torchao's rule).
        from torchao.optim import AdamW8bit

        return AdamW8bit(groups, lr=LEARNING_RATE, betas=(0.9, 0.95))
    # foreach: a few multi-tensor kernels per step. fused: one kernel per dtype/device group
    # (CUDA, and the CPU since torch 2.4).
    impl = {"fused": True} if kind == Optimizer.ADAMW_FUSED else {"foreach": True}
    return torch.optim.AdamW(groups, lr=LEARNING_RATE, betas=(0.9, 0.95), **impl)


class TrainStep:
    """Callable: runs one optimizer step and returns the step's mean loss (a device tensor)."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        batches,
        *,
        grad_accum: int,
        autocast,
        scaler: torch.amp.GradScaler | None,
        cudagraphs: bool,
        fault: str = "none",
        grad_sync: Callable[[bool], contextlib.AbstractContextManager] | None = None,
    ):
        self.model, self.optimizer, self.batches = model, optimizer, batches
        self.grad_accum, self.autocast, self.scaler = grad_accum, autocast, scaler
        self.cudagraphs, self.fault = cudagraphs, fault
        # Several ranks: `with grad_sync(last):` skips the gradient collectives on all but the
        # last micro-step (DDP no_sync, FSDP2 set_requires_gradient_sync), as real training does.
        self.grad_sync = grad_sync or (lambda last: contextlib.nullcontext())
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        # CUDA graphs with gradient accumulation: a micro-step's gradients live in the backward
        # graph's output memory, which the next micro-step's replay overwrites before autograd
        # adds to them (torch refuses: "accessing tensor output of CUDAGraphs that has been
        # overwritten"). So each micro-step's gradients are added into buffers of our own and
        # handed back to the parameters for the optimizer: one gradient-sized buffer and one
        # multi-tensor add per micro-step, the cost a training script pays for the same recipe.
        self._grad_buffers: list[torch.Tensor] | None = None
        self._has_grad: list[bool] = []
        self.accumulate_outside_graphs = cudagraphs and grad_accum > 1

    def __call__(self) -> torch.Tensor:
        loss_sum = None
        for i in range(self.grad_accum):
            x, y = self.batches.next()
            if self.cudagraphs:
                # Tell CUDA-graph trees a new iteration starts: the previous replay's outputs
                # (already consumed by backward) may be overwritten.
                torch.compiler.cudagraph_mark_step_begin()
            with self.grad_sync(i == self.grad_accum - 1):
                with self.autocast():
                    # Divide so the accumulated gradient is the mean over all micro-batches.
                    loss = self.model(x, y) / self.grad_accum
                loss = faults.poison_loss(loss, self.fault)
                if self.scaler is not None:
                    self.scaler.scale(loss).backward()
                else:
                    loss.backward()
            if self.accumulate_outside_graphs:
                self._take_grads(first=i == 0)
            detached = loss.detach()
            if self.cudagraphs:  # a graph's output memory is reused by the next replay
                detached = detached.clone()
            loss_sum = detached if loss_sum is None else loss_sum + detached
        if self.accumulate_outside_graphs:
            self._give_grads()
        faults.drift_gradients(self.params, self.fault)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients, not scaled ones
        nn.utils.clip_grad_norm_(self.params, GRAD_CLIP)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss_sum

    @contextlib.contextmanager
    def one_micro_batch_per_step(self, batches) -> Iterator[None]:
        """Steps of one micro-batch each from `batches` (the parity stream of a headroom
        check that also checks numerics: workers/trial.py), then back to this step's own
        accumulation and batches. The model, optimizer and compiled graphs are the same."""
        saved = (self.grad_accum, self.batches, self.accumulate_outside_graphs)
        self.grad_accum, self.batches, self.accumulate_outside_graphs = 1, batches, False
        try:
            yield
        finally:
            self.grad_accum, self.batches, self.accumulate_outside_graphs = saved

    def _take_grads(self, *, first: bool) -> None:
        """Move this micro-step's gradients (graph memory) into our buffers; the parameters'
        .grad become None, so the next backward writes fresh ones instead of adding."""
        grads = [p.grad for p in self.params]
        if self._grad_buffers is None:
            self._grad_buffers = [torch.zeros_like(p) for p in self.params]
        if first:
            self._has_grad = [g is not None for g in grads]
        else:
            self._has_grad = [
                h or g is not None for h, g in zip(self._has_grad, grads, strict=True)
            ]
        present = [(b, g) for b, g in zip(self._grad_buffers, grads, strict=True) if g is not None]
        if present:
            buffers, fresh = zip(*present, strict=True)
            if first:
                torch._foreach_copy_(list(buffers), list(fresh))
            else:
                torch._foreach_add_(list(buffers), list(fresh))
        for p in self.params:
            p.grad = None

    def _give_grads(self) -> None:
        assert self._grad_buffers is not None  # _take_grads ran in every micro-step
        # A parameter no micro-step reached keeps no gradient (the optimizer skips it).
        for p, buffer, has in zip(self.params, self._grad_buffers, self._has_grad, strict=True):
            p.grad = buffer if has else None
