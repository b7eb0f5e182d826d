"""The one place attention runs: every model family calls `attend`, which applies the backend.

SDPA backends are pinned with `torch.nn.attention.sdpa_kernel`, so a trial that asks for `flash`
really runs flash (or fails up front, see workers/support.py) instead of silently falling back
to another kernel. `flex` runs FlexAttention with a causal block mask.

A model that caps its attention logits (`softcap`: Gemma 2's attn_logit_softcapping, applied as
cap * tanh(score / cap) before the softmax) or attends within a sliding window shorter than the
sequence (`window`: each query sees itself and the window - 1 keys before it, as transformers'
sliding-window mask) runs only where that is applied: `flex` as a score function and a block
mask (as transformers' flex_attention does), `math` as explicit matmuls (as its eager
attention does). SDPA takes neither a score function nor a window, so its fused kernels
cannot: the support table refuses them for such a model (autotuner/spec/support_rules.py),
before any model is built. Attention dropout (`dropout_p`, what a Hugging Face model in
training passes) runs in SDPA's kernels and the explicit matmuls; FlexAttention has none, so
the table refuses `flex` for it.
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


def _windowed(window: int):
    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (kv_idx > q_idx - window)

    return mask_mod


# FlexAttention state, built eagerly by `prepare` when the model is built: a plain dict and a
# module global are what torch.compile traces through without a graph break (a functools.cache
# wrapper would break the graph in every layer).
_BLOCK_MASKS: dict[tuple[int, str, int | None], object] = {}  # (seq, device, window)
_SCORE_MODS: dict[float, object] = {}  # FlexAttention score functions, by logit cap
_FLEX_COMPILED = None


def _capped(cap: float):
    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return score_mod


def prepare(
    backend: Attention,
    seq_len: int,
    device,
    softcap: float | None = None,
    window: int | None = None,
) -> None:
    """Build what `attend` needs for this backend, outside any compiled region: the causal
    block mask, and the windowed one where the model has a window shorter than the sequence.
    One score function per cap: a new function object each call would recompile the kernel."""
    global _FLEX_COMPILED
    if backend != Attention.FLEX:
        return
    if softcap is not None and softcap not in _SCORE_MODS:
        _SCORE_MODS[softcap] = _capped(softcap)
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    device = torch.device(device)
    windows = [None] + ([window] if window is not None and window < seq_len else [])
    for w in windows:
        key = (seq_len, str(device), w)
        if key not in _BLOCK_MASKS:
            _BLOCK_MASKS[key] = create_block_mask(
                _causal if w is None else _windowed(w),
                B=None,
                H=None,
                Q_LEN=seq_len,
                KV_LEN=seq_len,
                device=str(device),
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
    softcap: float | None = None,
    window: int | None = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """Causal self-attention over (batch, heads, seq, head_dim) tensors with the given backend.

    k and v must already have as many heads as q (grouped-query models expand them first).
    `scale` defaults to 1/sqrt(head_dim); `softcap` caps the scaled logits and `window` limits
    how far back a query sees (see above; a window as long as the sequence limits nothing);
    `dropout_p` drops attention weights out.
    """
    if window is not None and window >= k.shape[-2]:
        window = None
    if backend == Attention.FLEX:
        from torch.nn.attention.flex_attention import flex_attention

        if dropout_p:  # refused before any model is built (support_rules.attention_verdict)
            raise ValueError("flex attention has no dropout")
        mask = _BLOCK_MASKS[(q.shape[-2], str(q.device), window)]
        score_mod = None if softcap is None else _SCORE_MODS[softcap]
        # Inside a compiled model the plain op is traced and fused with the rest; eager models
        # call the separately compiled kernel.
        kernel = _FLEX_COMPILED
        if torch.compiler.is_compiling() or kernel is None or not q.is_cuda:
            kernel = flex_attention
        return kernel(q, k, v, score_mod=score_mod, block_mask=mask, scale=scale)
    if softcap is not None or window is not None:
        if backend != Attention.MATH:  # refused before any model is built, as above
            raise ValueError(f"attention {backend.value!r} takes no logit cap or window")
        return _explicit_math(q, k, v, scale, softcap, window, dropout_p)
    with sdpa_kernel(SDPA_BACKENDS[backend]):
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=scale, dropout_p=dropout_p
        )


def _explicit_math(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None,
    cap: float | None,
    window: int | None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """Causal attention with capped logits or a window as explicit matmuls, the scores
    materialised and the softmax taken in fp32: transformers' eager attention for such models
    (Gemma 2)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    n_q, n_k = q.shape[-2], k.shape[-2]
    ones = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device)
    hidden = ones.triu(n_k - n_q + 1)  # the future
    if window is not None:
        hidden |= ones.tril(n_k - n_q - window)  # further back than the window
    scores = scores.masked_fill(hidden, float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    weights = F.dropout(weights, p=dropout_p) if dropout_p else weights
    return torch.matmul(weights, v)
