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
from collections.abc import Callable

import torch
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
    return frozenset(getattr(aten, n).default for n in names if hasattr(aten, n))


def _policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in _saved_ops() else CheckpointPolicy.PREFER_RECOMPUTE


def _selective_context():
    return create_selective_checkpoint_contexts(_policy)


def run_block(fn: Callable[..., torch.Tensor], mode: Checkpointing, *args) -> torch.Tensor:
    """Call `fn(*args)` (one block's forward) under the checkpointing mode."""
    if mode == Checkpointing.NONE or not torch.is_grad_enabled():
        return fn(*args)
    if mode == Checkpointing.FULL:
        return checkpoint(fn, *args, use_reentrant=False)
    return checkpoint(fn, *args, use_reentrant=False, context_fn=_selective_context)
