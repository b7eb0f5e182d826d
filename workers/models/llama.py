"""A Llama-style decoder (Touvron et al. 2023; Llama 3 shapes): RMSNorm, SwiGLU MLP, rotary
position embeddings, grouped-query attention, no biases. Same build switches as gpt.py.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from autotuner.spec import Attention, Checkpointing, Kernels, ModelSpec
from workers.models import kernels as fused
from workers.models.attention import attend
from workers.models.checkpointing import run_block

ROPE_THETA = 500_000.0  # Llama 3's base


def rope_tables(seq_len: int, head_dim: int, theta: float = ROPE_THETA) -> torch.Tensor:
    """cos/sin tables of shape (2, seq_len, head_dim) for the rotate-half formulation."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return torch.stack([angles.cos(), angles.sin()])


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Rotate (B, H, T, D) queries/keys by position (real arithmetic: compile- and fp8-friendly)."""
    # The fp32 tables are cast to x's dtype: under autocast q/k are bf16, and a fp32 product
    # would hand SDPA mixed dtypes.
    return fused._rotate(x, rope[0].to(x.dtype), rope[1].to(x.dtype))


class SelfAttention(nn.Module):
    def __init__(self, spec: ModelSpec, attention: Attention, kernels: Kernels):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = spec.n_head, spec.kv_heads, spec.head_dim
        self.attention, self.kernels = attention, kernels
        self.wq = nn.Linear(spec.d_model, spec.n_head * spec.head_dim, bias=False)
        self.wk = nn.Linear(spec.d_model, spec.kv_heads * spec.head_dim, bias=False)
        self.wv = nn.Linear(spec.d_model, spec.kv_heads * spec.head_dim, bias=False)
        self.wo = nn.Linear(spec.n_head * spec.head_dim, spec.d_model, bias=False)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        q, k = fused.rope(q, k, rope[0], rope[1], self.kernels)
        if self.n_kv_head != self.n_head:
            # Grouped-query attention: each kv head serves n_head/n_kv_head query heads. Expanded
            # explicitly because not every SDPA backend accepts enable_gqa; all of them accept this.
            rep = self.n_head // self.n_kv_head
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = attend(q, k, v, self.attention)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, spec: ModelSpec, kernels: Kernels):
        super().__init__()
        self.kernels = kernels
        self.w1 = nn.Linear(spec.d_model, spec.ffn_dim, bias=False)
        self.w2 = nn.Linear(spec.ffn_dim, spec.d_model, bias=False)
        self.w3 = nn.Linear(spec.d_model, spec.ffn_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(fused.swiglu(self.w1(x), self.w3(x), self.kernels))


class Block(nn.Module):
    def __init__(
        self,
        spec: ModelSpec,
        attention: Attention,
        checkpointing: Checkpointing,
        kernels: Kernels = Kernels.NONE,
    ):
        super().__init__()
        self.attention_norm = fused.rms_norm(spec.d_model, 1e-5, kernels)
        self.attention = SelfAttention(spec, attention, kernels)
        self.ffn_norm = fused.rms_norm(spec.d_model, 1e-5, kernels)
        self.feed_forward = FeedForward(spec, kernels)
        self.checkpointing = checkpointing

    def _forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), rope)
        return x + self.feed_forward(self.ffn_norm(x))

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        # No dropout in this family: nothing random to replay in the recompute.
        return run_block(self._forward, self.checkpointing, x, rope, random=False)


class Llama(nn.Module):
    """Llama-style decoder; `padded_vocab` rows in the embedding and output layer."""

    def __init__(
        self,
        spec: ModelSpec,
        *,
        padded_vocab: int,
        attention: Attention,
        checkpointing: Checkpointing,
        kernels: Kernels = Kernels.NONE,
    ):
        super().__init__()
        self.spec, self.kernels = spec, kernels
        self.tok_embeddings = nn.Embedding(padded_vocab, spec.d_model)
        self.layers = nn.ModuleList(
            Block(spec, attention, checkpointing, kernels) for _ in range(spec.n_layer)
        )
        self.norm = fused.rms_norm(spec.d_model, 1e-5, kernels)
        self.output = nn.Linear(spec.d_model, padded_vocab, bias=False)
        if spec.tie_embeddings:
            self.tok_embeddings.weight = self.output.weight
        # Not a parameter and not saved: recomputed from the shapes at build time.
        self.register_buffer("rope", rope_tables(spec.seq_len, spec.head_dim), persistent=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy. Padded vocab rows never get a target."""
        T = idx.shape[1]
        rope = self.rope[:, :T]
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x, rope)
        return self.head_loss(x, targets)

    def head_loss(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The final norm, the output layer and the loss: a region compile_scope 'block'
        compiles on its own (workers/compiling.py)."""
        return fused.output_loss(self.norm(x), self.output, targets, self.kernels)
