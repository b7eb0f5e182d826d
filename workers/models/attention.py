"""The one place attention runs: every model family calls `attend`, which applies the backend.

SDPA backends are pinned with `torch.nn.attention.sdpa_kernel`, so a trial that asks for `flash`
really runs flash (or fails up front, see workers/support.py) instead of silently falling back
to another kernel. `flex` runs FlexAttention with a causal block mask.
"""

from __future__ import annotations

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


# FlexAttention state, built eagerly by `prepare` when the model is built: a plain dict and a
# module global are what torch.compile traces through without a graph break (a functools.cache
# wrapper would break the graph in every layer).
_BLOCK_MASKS: dict[tuple[int, str], object] = {}
_FLEX_COMPILED = None


def prepare(backend: Attention, seq_len: int, device) -> None:
    """Build what `attend` needs for this backend, outside any compiled region."""
    global _FLEX_COMPILED
    if backend != Attention.FLEX:
        return
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    device = torch.device(device)
    key = (seq_len, str(device))
    if key not in _BLOCK_MASKS:
        _BLOCK_MASKS[key] = create_block_mask(
            _causal, B=None, H=None, Q_LEN=seq_len, KV_LEN=seq_len, device=str(device)
        )
    if device.type == "cuda" and _FLEX_COMPILED is None:
        # Eager FlexAttention is a slow reference implementation that materialises the scores;
        # its fused kernel only exists through torch.compile. torchtitan compiles it on its own
        # for the same reason, so a `flex` trial on CUDA always runs the fused kernel (its
        # compile time lands in the first step, never in throughput).
        _FLEX_COMPILED = torch.compile(flex_attention, dynamic=False)


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
        from torch.nn.attention.flex_attention import flex_attention

        mask = _BLOCK_MASKS[(q.shape[-2], str(q.device))]
        # Inside a compiled model the plain op is traced and fused with the rest; eager models
        # call the separately compiled kernel.
        kernel = _FLEX_COMPILED
        if torch.compiler.is_compiling() or kernel is None or not q.is_cuda:
            kernel = flex_attention
        return kernel(q, k, v, block_mask=mask, scale=scale)
    with sdpa_kernel(SDPA_BACKENDS[backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
