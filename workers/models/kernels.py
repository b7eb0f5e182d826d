"""The `kernels` knob: Liger-Kernel's fused Triton kernels, the same way for every family.

- `fused-ce`: the output layer and the cross-entropy in one chunked kernel
  (`liger_fused_linear_cross_entropy`). The logits of a micro-batch (B x T x vocab, with the
  fp32 copy the loss takes and the gradient of the same size) are never materialised: for a
  128k-256k vocabulary they are the largest single activation, so the micro-batch that fits
  can grow. The loss is the same mean next-token cross-entropy (the parity check compares).
- `cce`: the output layer and the cross-entropy in Apple's cut-cross-entropy kernels
  (`cut_cross_entropy.linear_cross_entropy`): no logits in memory at all, not even a chunk (the
  log-sum-exp is reduced on chip; backward recomputes each block of logits). Its Triton kernels
  do not see autocast, so the hidden states and the weight are cast to the autocast dtype here
  (what autocast does for the unfused output layer); its backward takes half inputs only, so
  fp32 and tf32 are refused (autotuner/spec/support_rules.py).
- `liger`: fused-ce plus Liger's RMSNorm (or LayerNorm), SwiGLU and RoPE kernels. The built-in
  families swap their modules here; a Hugging Face model takes Liger's own patch for its
  architecture (workers/models/hf.py).

The kernels are Triton: CUDA only (workers/support.py refuses them on the CPU). liger-kernel and
cut-cross-entropy are imported only when the knob asks for them.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from autotuner.spec import Kernels


def output_loss(
    hidden: torch.Tensor,
    output: nn.Linear,
    targets: torch.Tensor,
    kernels: Kernels,
    softcap: float | None = None,
) -> torch.Tensor:
    """Mean next-token cross-entropy of `output(hidden)` against `targets`, with or without the
    logits. `softcap`: tanh soft-capping of the logits (Gemma 2's final_logit_softcapping)."""
    if kernels == Kernels.NONE:
        logits = output(hidden)
        if softcap is not None:
            logits = torch.tanh(logits / softcap) * softcap
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))
    if kernels == Kernels.CCE:
        return _cce_loss(hidden, output, targets, softcap)
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    return liger_fused_linear_cross_entropy(
        hidden.reshape(-1, hidden.size(-1)),
        output.weight,
        targets.reshape(-1),
        bias=output.bias,
        softcap=softcap,
    )


def _cce_loss(
    hidden: torch.Tensor, output: nn.Linear, targets: torch.Tensor, softcap: float | None
) -> torch.Tensor:
    from cut_cross_entropy import linear_cross_entropy

    if output.bias is not None:
        # cut-cross-entropy 25.1.1 has no bias term; build_hf refuses such a model first.
        raise ValueError("kernels 'cce' cannot fuse an output layer with a bias")
    hidden, weight = hidden.reshape(-1, hidden.size(-1)), output.weight
    if torch.is_autocast_enabled(hidden.device.type):
        dtype = torch.get_autocast_dtype(hidden.device.type)
        hidden, weight = hidden.to(dtype), weight.to(dtype)
    # Its defaults otherwise: mean over the rows, gradient filtering ("high": skip the blocks
    # whose softmax is below bf16's resolution), what a user calling it gets.
    return linear_cross_entropy(hidden, weight, targets.reshape(-1), softcap=softcap, impl="cce")


def rms_norm(dim: int, eps: float, kernels: Kernels) -> nn.Module:
    if kernels != Kernels.LIGER:
        return nn.RMSNorm(dim, eps=eps)
    from liger_kernel.transformers.rms_norm import LigerRMSNorm

    return LigerRMSNorm(dim, eps=eps)


def layer_norm(dim: int, kernels: Kernels) -> nn.Module:
    if kernels != Kernels.LIGER:
        return nn.LayerNorm(dim)
    from liger_kernel.transformers.layer_norm import LigerLayerNorm

    # nn.LayerNorm's defaults: eps 1e-5, a bias, weight ones and bias zeros.
    return LigerLayerNorm(dim, eps=1e-5, bias=True)


def swiglu(gate: torch.Tensor, up: torch.Tensor, kernels: Kernels) -> torch.Tensor:
    """silu(gate) * up, in one kernel with liger (it recomputes silu in backward)."""
    if kernels != Kernels.LIGER:
        return F.silu(gate) * up
    from liger_kernel.transformers.functional import liger_swiglu

    return liger_swiglu(gate, up)


def rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kernels: Kernels
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate (B, H, T, D) queries and keys (rotate-half form; cos/sin of shape (T, D))."""
    cos, sin = cos.to(q.dtype), sin.to(q.dtype)
    if kernels == Kernels.LIGER:
        from liger_kernel.transformers.rope import liger_rotary_pos_emb

        # Liger's kernel takes (1, T, D) tables and the kv heads as they are (grouped query).
        return liger_rotary_pos_emb(q, k, cos[None], sin[None])
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin
