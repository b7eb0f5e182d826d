"""A user's own model for `family: factory` (examples/my-model.yaml): a small pre-norm decoder.

What makes it tunable (docs/models.md):
- `build(...)` declares the sizes it needs as keyword arguments (vocab_size, seq_len, n_layer,
  d_model, n_head) plus `attend`, the trial's attention kernel, and `mlp_ratio` from the spec's
  factory_args;
- its forward maps token ids (B, T) to logits (B, T, vocab_size);
- it lists its transformer blocks as `self.blocks`, so activation checkpointing can wrap them.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int, mlp_ratio: int, attend):
        super().__init__()
        self.n_head, self.attend = n_head, attend
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.norm2 = nn.LayerNorm(d_model)
        self.up = nn.Linear(d_model, mlp_ratio * d_model, bias=False)
        self.down = nn.Linear(mlp_ratio * d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = self.attend(q, k, v)  # causal attention with the kernel the trial chose
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyDecoder(nn.Module):
    def __init__(self, vocab_size, seq_len, n_layer, d_model, n_head, mlp_ratio, attend):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Parameter(torch.zeros(seq_len, d_model))
        self.blocks = nn.ModuleList(
            Block(d_model, n_head, mlp_ratio, attend) for _ in range(n_layer)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def build(*, vocab_size, seq_len, n_layer, d_model, n_head, attend, mlp_ratio=4):
    return TinyDecoder(vocab_size, seq_len, n_layer, d_model, n_head, mlp_ratio, attend)
