"""Any Hugging Face causal LM, built from its config with random weights (nothing downloaded).

Attention is routed through workers.models.attention.attend (registered with transformers'
AttentionInterface), so the `attention` knob picks the kernel for HF models exactly as for the
built-in families. transformers is optional on a worker: without it the trial is an
`environment` failure, which stops the study with the remedy (no config of it could run).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from autotuner.spec import Attention, Checkpointing, ModelSpec
from workers.errors import UnsupportedConfig, missing_package
from workers.models.attention import attend

ATTN_NAME = "autotuner"


def _register(backend: Attention) -> None:
    from transformers import AttentionInterface

    def attention_forward(module, query, key, value, attention_mask, scaling=None, **kwargs):
        # We train on full, unpadded sequences: the causal mask is the whole mask, so HF's mask
        # tensor is not needed (and not built, see the mask registration below).
        n_rep = query.shape[1] // key.shape[1]
        if n_rep > 1:  # grouped-query attention: expand kv heads as workers/models/llama.py does
            key, value = key.repeat_interleave(n_rep, dim=1), value.repeat_interleave(n_rep, dim=1)
        out = attend(query, key, value, backend, scale=scaling)
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register(ATTN_NAME, attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface

        AttentionMaskInterface.register(ATTN_NAME, lambda *args, **kwargs: None)
    except ImportError:  # older transformers: it builds a mask we ignore
        pass


class HFCausalLM(nn.Module):
    """Wraps a transformers model so it has the built-in families' forward(idx, targets) -> loss."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.inner(input_ids=idx, use_cache=False).logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))


def build_hf(
    spec: ModelSpec, *, padded_vocab: int, attention: Attention, checkpointing: Checkpointing
) -> nn.Module:
    try:
        import transformers
    except ImportError as exc:
        # Not a property of any config (every one needs it): the worker's environment.
        raise missing_package(
            exc,
            "family 'hf'",
            "pip install transformers in the workers' Python environment, or use family "
            "'gpt2' or 'llama'",
        ) from exc
    if checkpointing == Checkpointing.SELECTIVE:
        raise UnsupportedConfig(
            "selective checkpointing is implemented for the built-in families only; "
            "use checkpointing 'none' or 'full' with family 'hf'",
            {"checkpointing": "selective"},
        )
    cfg = dict(spec.hf_config or {})
    model_type = cfg.pop("model_type", None)
    if model_type is None:
        raise UnsupportedConfig(
            "hf_config needs 'model_type' (e.g. 'llama', 'qwen2', 'gpt2')", {}
        )  # {}: no knob is to blame, no config of the model can run
    try:
        config = transformers.AutoConfig.for_model(model_type, **cfg)
    except (ValueError, KeyError) as exc:
        raise UnsupportedConfig(
            f"transformers {transformers.__version__} cannot build model_type "
            f"{model_type!r}: {exc}",
            {},
        ) from exc
    # Padded rows are extra embedding/output rows; the data never uses them as targets.
    config.vocab_size = padded_vocab
    config.use_cache = False
    _register(attention)
    inner = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=ATTN_NAME)
    inner = inner.float()
    if checkpointing == Checkpointing.FULL:
        # Renamed in newer transformers; same behaviour (per-layer, non-reentrant checkpoint).
        if hasattr(inner, "activation_checkpointing_enable"):
            inner.activation_checkpointing_enable(
                activation_checkpointing_kwargs={"use_reentrant": False}
            )
        else:
            inner.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
    inner.train()
    return HFCausalLM(inner)
