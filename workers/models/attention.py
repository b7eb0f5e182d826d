"""The one place attention runs: every model family calls `attend`, which applies the backend.

SDPA backends are pinned with `torch.nn.attention.sdpa_kernel`, so a trial that asks for `flash`
really runs flash (or fails up front, see workers/support.py) instead of silently falling back
to another kernel. `flex` runs FlexAttention with a causal block mask.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from autotuner.spec import Attention

SDPA_BACKENDS: dict[Attention, SDPBackend] = {
    Attention.MATH: SDPBackend.MATH,
    Attention.EFFICIENT: SDPBackend.EFFICIENT_ATTENTION,
    Attention.FLASH: SDPBackend.FLASH_ATTENTION,
    Attention.CUDNN: SDPBackend.CUDNN_ATTENTION,
}


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


@functools.cache
def causal_block_mask(seq_len: int, device: str):
    """FlexAttention's causal mask for one sequence length, built once per process."""
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(_causal, B=None, H=None, Q_LEN=seq_len, KV_LEN=seq_len, device=device)


@functools.cache
def _flex_kernel(compiled: bool):
    from torch.nn.attention.flex_attention import flex_attention

    # Eager FlexAttention is a slow reference implementation that materialises the scores; its
    # fused kernel only exists through torch.compile. torchtitan compiles it on its own for the
    # same reason, so a `flex` trial on CUDA always runs the compiled kernel (its compile time is
    # part of the first step, never of throughput).
    return torch.compile(flex_attention, dynamic=False) if compiled else flex_attention


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    backend: Attention,
    scale: float | None = None,
) -> torch.Tensor:
    """Causal self-attention over (batch, heads, seq, head_dim) tensors with the given backend.

    k and v must already have as many heads as q (grouped-query models expand them first).
    `scale` defaults to 1/sqrt(head_dim).
    """
    if backend == Attention.FLEX:
        mask = causal_block_mask(q.shape[-2], str(q.device))
        return _flex_kernel(q.is_cuda)(q, k, v, block_mask=mask, scale=scale)
    with sdpa_kernel(SDPA_BACKENDS[backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
