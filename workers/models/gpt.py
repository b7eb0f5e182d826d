"""GPT-2 (Radford et al. 2019) in the nanoGPT layout: LayerNorm, GELU MLP, learned positions,
tied input/output embeddings. Attention and checkpointing are switches applied at build time.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from autotuner.spec import Attention, Checkpointing, Kernels, ModelSpec
from workers.models import kernels as fused
from workers.models.attention import attend
from workers.models.checkpointing import run_block


class CausalSelfAttention(nn.Module):
    def __init__(self, spec: ModelSpec, attention: Attention):
        super().__init__()
        self.n_head = spec.n_head
        self.attention = attention
        self.c_attn = nn.Linear(spec.d_model, 3 * spec.d_model)
        self.c_proj = nn.Linear(spec.d_model, spec.d_model)
        self.dropout = spec.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        # (B, T, C) -> (B, n_head, T, head_dim): the layout every SDPA backend and flex expect.
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = attend(q, k, v, self.attention)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return F.dropout(self.c_proj(y), self.dropout, self.training)


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.c_fc = nn.Linear(spec.d_model, spec.ffn_dim)
        self.c_proj = nn.Linear(spec.ffn_dim, spec.d_model)
        self.dropout = spec.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(self.c_proj(F.gelu(self.c_fc(x))), self.dropout, self.training)


class Block(nn.Module):
    def __init__(
        self,
        spec: ModelSpec,
        attention: Attention,
        checkpointing: Checkpointing,
        kernels: Kernels = Kernels.NONE,
    ):
        super().__init__()
        # GPT-2's MLP is not gated: Liger has no kernel for it, only for the LayerNorms.
        self.ln_1 = fused.layer_norm(spec.d_model, kernels)
        self.attn = CausalSelfAttention(spec, attention)
        self.ln_2 = fused.layer_norm(spec.d_model, kernels)
        self.mlp = MLP(spec)
        self.checkpointing = checkpointing
        self.random = spec.dropout > 0  # its recompute must replay the dropout masks

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return run_block(self._forward, self.checkpointing, x, random=self.random)


class GPT(nn.Module):
    """GPT-2. `padded_vocab` >= spec.vocab_size rows in the (tied) embedding and output layer."""

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
        self.wte = nn.Embedding(padded_vocab, spec.d_model)
        self.wpe = nn.Embedding(spec.seq_len, spec.d_model)
        self.drop = nn.Dropout(spec.dropout)
        self.blocks = nn.ModuleList(
            Block(spec, attention, checkpointing, kernels) for _ in range(spec.n_layer)
        )
        self.ln_f = fused.layer_norm(spec.d_model, kernels)
        self.lm_head = nn.Linear(spec.d_model, padded_vocab, bias=False)
        if spec.tie_embeddings:
            self.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        # GPT-2's scaled init of the residual projections (1/sqrt(2 * n_layer)).
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * spec.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy. Padded vocab rows never get a target."""
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        return self.head_loss(x, targets)

    def head_loss(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The final norm, the output layer and the loss: a region compile_scope 'block'
        compiles on its own (workers/compiling.py)."""
        return fused.output_loss(self.ln_f(x), self.lm_head, targets, self.kernels)
