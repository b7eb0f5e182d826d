"""Activation checkpointing for one transformer block: none, selective or full.

- full: the whole block is recomputed in backward; only its input is kept (torch.utils.checkpoint,
  non-reentrant, so it composes with torch.compile and autocast).
- selective: the block is re-run in backward, but the outputs of the expensive ops (matmuls and
  the attention kernel) are kept and reused; only the cheap ops (norms, activations, RoPE,
  residual adds) are recomputed. This is torchtitan's op-level selective checkpointing, the
  memory/compute trade-off of Korthikanti et al. 2022 on today's fused attention kernels.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn as nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from autotuner.spec import Checkpointing


@functools.cache
def _saved_ops() -> frozenset:
    aten = torch.ops.aten
    names = [
        "mm",
        "addmm",
        "bmm",
        "_scaled_mm",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    ]
    # Some ops exist only in some builds/versions; keep the ones this torch has.
    ops = {getattr(aten, n).default for n in names if hasattr(aten, n)}
    # FlexAttention is a higher-order op, seen by the policy as itself (as torchtitan saves it):
    # without it a selective block re-ran flex's forward kernel in backward, which is full
    # checkpointing's trade for the attention, not selective's.
    flex = getattr(torch._higher_order_ops, "flex_attention", None)
    if flex is not None:
        ops.add(flex)
    return frozenset(ops)


def _policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in _saved_ops() else CheckpointPolicy.PREFER_RECOMPUTE


def _selective_context():
    return create_selective_checkpoint_contexts(_policy)


def run_block(
    fn: Callable[..., torch.Tensor], mode: Checkpointing, *args, random: bool = True
) -> torch.Tensor:
    """Call `fn(*args)` (one block's forward) under the checkpointing mode. `random`: the block
    draws random numbers (dropout), so its recompute must replay the forward's RNG state.

    A block without randomness does not preserve the RNG state: there is nothing to replay.
    And on the H200 every checkpointed trial compiled cold, a re-run of the same config
    included (Llama 8B: 104 s against 88 s cold, where a config without checkpointing re-ran
    in 37 s of 111), while on the CPU a checkpointed re-run hits the cache. The likely cause:
    under torch.compile on CUDA, preserving the state puts graphsafe_run_with_rng_state in the
    graph, which inductor's FX-graph cache bypasses (pytorch/pytorch#185562, merged after the
    torch 2.11 the H200 runs). tests/gpu checks the cache hit on a GPU."""
    if mode == Checkpointing.NONE or not torch.is_grad_enabled():
        return fn(*args)
    context = {} if mode == Checkpointing.FULL else {"context_fn": _selective_context}
    return checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=random, **context)


class CheckpointedBlock(nn.Module):
    """A block whose forward we do not write (a factory's, a Hugging Face decoder layer) run
    under the checkpointing knob. `random`: the block draws random numbers (dropout)."""

    def __init__(self, block: nn.Module, mode: Checkpointing, random: bool = True):
        super().__init__()
        self.block, self.mode, self.random = block, mode, random

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return run_block(lambda *a: self.block(*a, **kwargs), self.mode, *args, random=self.random)


def checkpoint_blocks(
    model: nn.Module, blocks: Iterable[nn.Module], mode: Checkpointing, random: bool = True
) -> None:
    """Wrap each of `model`'s `blocks` in a CheckpointedBlock, in place."""
    names = {id(m): name for name, m in model.named_modules()}
    for block in blocks:
        parent_name, _, child = names[id(block)].rpartition(".")
        parent = model.get_submodule(parent_name)
        parent.register_module(child, CheckpointedBlock(block, mode, random))
