"""The smallest language model a trial trains (family "factory"): token embedding, then the
output layer. tests/workers/test_compile_cache.py compiles it for real on the CPU, where every
kernel inductor generates is a C++ build: a one-layer GPT-2 has 12 of them, this model 4, and
what that test asserts (which graphs a trial finds in its study's cache) does not depend on the
layers."""

from __future__ import annotations

import torch.nn as nn


def build(vocab_size: int, d_model: int, attend) -> nn.Module:
    del attend  # declared because a factory must take it (docs/models.md); no attention here
    return nn.Sequential(nn.Embedding(vocab_size, d_model), nn.Linear(d_model, vocab_size))
