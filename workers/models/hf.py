"""Any Hugging Face causal LM, built from its config with random weights (nothing downloaded).

Attention is routed through workers.models.attention.attend (registered with transformers'
AttentionInterface), so the `attention` knob picks the kernel for HF models exactly as for the
built-in families; checkpointing wraps the decoder layers as the built-in blocks are wrapped;
the fused kernels take Liger's patch for the architecture and our fused loss (Liger's or
cut-cross-entropy's: workers/models/kernels.py). transformers is optional on a worker: without
it the trial is an `environment` failure, which stops the study with the remedy (no config of
it could run).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from autotuner.spec import Attention, Checkpointing, Kernels, ModelSpec
from workers.errors import UnsupportedConfig, missing_package
from workers.models import kernels as fused
from workers.models.attention import attend, prepare
from workers.models.checkpointing import checkpoint_blocks

ATTN_NAME = "autotuner"


def _register(backend: Attention) -> None:
    from transformers import AttentionInterface

    def attention_forward(
        module,
        query,
        key,
        value,
        attention_mask,
        scaling=None,
        softcap=None,
        sliding_window=None,
        **kwargs,
    ):
        # We train on full, unpadded sequences: the causal mask (within the layer's sliding
        # window, if it has one) is the whole mask, so HF's mask tensor is not needed (and not
        # built, see the mask registration below). Attention dropout is refused when the model
        # is built (`_attention_refusal`).
        n_rep = query.shape[1] // key.shape[1]
        if n_rep > 1:  # grouped-query attention: expand kv heads as workers/models/llama.py does
            key, value = key.repeat_interleave(n_rep, dim=1), value.repeat_interleave(n_rep, dim=1)
        out = attend(
            query, key, value, backend, scale=scaling, softcap=softcap, window=sliding_window
        )
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register(ATTN_NAME, attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface

        AttentionMaskInterface.register(ATTN_NAME, lambda *args, **kwargs: None)
    except ImportError:  # older transformers: it builds a mask we ignore
        pass


# Config fields that scale the logits in ways the fused loss does not know: such a model keeps
# its own output layer and loss (kernels 'none').
_LOGIT_SCALES = ("logit_scale", "logits_scaling", "output_multiplier_scale")


def _attention_refusal(config) -> str | None:
    """Why the attention hook cannot run this model as transformers would, or None. The hook
    runs causal attention (with the logit cap and the sliding window where the model has them:
    `attend`) and no dropout, so it refuses a model that drops attention weights out."""
    dropout = getattr(config, "attention_dropout", 0.0) or 0.0
    if dropout > 0:
        return (
            f"hf_config's attention_dropout is {dropout:g}, and the autotuner's attention runs "
            "none: set attention_dropout to 0 in hf_config (pretraining runs without it)"
        )
    return None


class HFCausalLM(nn.Module):
    """Wraps a transformers model so it has the built-in families' forward(idx, targets) -> loss."""

    def __init__(self, inner: nn.Module, kernels: Kernels = Kernels.NONE):
        super().__init__()
        self.inner, self.kernels = inner, kernels
        self.softcap = getattr(inner.config, "final_logit_softcapping", None)
        # A model that scales its logits some other way keeps transformers' own output layer
        # (only with kernels 'none': build_hf refuses the fused kernels for it).
        self.own_head = not logit_scales(inner.config)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if not self.own_head:
            logits = self.inner(input_ids=idx, use_cache=False).logits
            return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))
        # The decoder's last hidden state, then the output layer and the loss: what
        # transformers' *ForCausalLM forward does (soft-capping included), as a region of its
        # own that compile_scope 'block' compiles (workers/compiling.py).
        base = getattr(self.inner, self.inner.base_model_prefix)
        hidden = base(input_ids=idx, use_cache=False).last_hidden_state
        return self.head_loss(hidden, targets)

    def head_loss(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        output = self.inner.get_output_embeddings()
        return fused.output_loss(hidden, output, targets, self.kernels, self.softcap)


def build_hf(
    spec: ModelSpec,
    *,
    padded_vocab: int,
    attention: Attention,
    checkpointing: Checkpointing,
    kernels: Kernels = Kernels.NONE,
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
    refusal = _attention_refusal(config)
    if refusal is not None:
        raise UnsupportedConfig(refusal, {})  # {}: the model's, whatever the knobs
    # The window as transformers reads it (Qwen2's is None unless use_sliding_window): the
    # flex block mask for it, where it is shorter than the sequence.
    window = getattr(config, "sliding_window", None)
    prepare(attention, spec.seq_len, torch.get_default_device(), spec.attention_softcap, window)
    # Padded rows are extra embedding/output rows; the data never uses them as targets.
    config.vocab_size = padded_vocab
    config.use_cache = False
    _register(attention)
    if kernels != Kernels.NONE:
        _check_fusable(config, kernels)
    if kernels == Kernels.LIGER:
        _patch_liger(model_type)
    inner = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=ATTN_NAME)
    inner = inner.float()
    head = inner.get_output_embeddings()
    if kernels == Kernels.CCE and getattr(head, "bias", None) is not None:
        # cut-cross-entropy 25.1.1 takes the classifier's weight only (Liger's takes a bias).
        raise UnsupportedConfig(
            f"kernels 'cce': this model's output layer has a bias, which cut-cross-entropy's "
            f"loss does not take ({type(inner).__name__}); use kernels 'fused-ce' or 'none'",
            {"kernels": kernels.value},
        )
    if checkpointing != Checkpointing.NONE:
        # Over the decoder layers, as for the built-in blocks: full recomputes the layer, selective
        # keeps its matmul and attention outputs (workers/models/checkpointing.py).
        from workers.compiling import repeated_blocks

        layers = repeated_blocks(inner)
        if layers is None:
            raise UnsupportedConfig(
                f"checkpointing {checkpointing.value!r}: found no list of decoder layers in "
                f"{type(inner).__name__}; use checkpointing 'none'",
                {"checkpointing": checkpointing.value},
            )
        checkpoint_blocks(inner, layers, checkpointing, random=_has_dropout(config))
    inner.train()
    return HFCausalLM(inner, kernels)


def _has_dropout(config) -> bool:
    """Whether any dropout of the config is on (then a recompute must replay its masks)."""
    rates = [v for k, v in config.to_dict().items() if "dropout" in k or k.endswith("pdrop")]
    return any(isinstance(v, int | float) and v > 0 for v in rates)


def logit_scales(config) -> list[str]:
    """The config fields by which this model scales its logits beyond soft-capping."""
    return [name for name in _LOGIT_SCALES if getattr(config, name, None) not in (None, 1, 1.0)]


def _check_fusable(config, kernels: Kernels) -> None:
    scaled = logit_scales(config)
    if scaled:
        raise UnsupportedConfig(
            f"kernels {kernels.value!r} fuse the output layer into the loss, and this model "
            f"scales its logits ({', '.join(scaled)}), which the fused loss does not; use "
            "kernels 'none'",
            {"kernels": kernels.value},
        )


def _patch_liger(model_type: str) -> None:
    """Liger's patch for the architecture (its RMSNorm, SwiGLU and RoPE, in the transformers
    modules before the model is built); the fused loss is ours (HFCausalLM), so Liger's own
    loss patches stay off."""
    import inspect

    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    apply = MODEL_TYPE_TO_APPLY_LIGER_FN.get(model_type)
    if apply is None:
        covered = ", ".join(sorted(MODEL_TYPE_TO_APPLY_LIGER_FN))
        raise UnsupportedConfig(
            f"kernels 'liger': Liger-Kernel has no patch for model_type {model_type!r} (it covers "
            f"{covered}); use kernels 'fused-ce' (the fused loss alone) or 'none'",
            {"kernels": Kernels.LIGER.value},
        )
    accepted = inspect.signature(apply).parameters
    off = {"cross_entropy": False, "fused_linear_cross_entropy": False}
    apply(**{k: v for k, v in off.items() if k in accepted})
