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

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from autotuner.spec import Attention, Checkpointing, Kernels, ModelSpec, attention_verdict
from workers.errors import UnsupportedConfig, missing_package
from workers.models import kernels as fused
from workers.models.attention import attend, prepare
from workers.models.checkpointing import checkpoint_blocks

ATTN_NAME = "autotuner"


# What the hook records instead of attending while `_probe_attention` runs (None otherwise).
_PROBE: list[dict[str, Any]] | None = None
# Attention-call arguments that would make the hook train another model: refused at build.
_NOT_APPLIED = {
    "s_aux": "learned attention sinks",
    "sinks": "learned attention sinks",
    "position_bias": "a position bias added to the scores",
}


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
        dropout=0.0,
        **kwargs,
    ):
        if _PROBE is not None:  # what this layer asks of attention, not the attention itself
            seen = {k: kwargs[k] for k in (*_NOT_APPLIED, "is_causal") if k in kwargs}
            _PROBE.append(
                {"softcap": softcap, "sliding_window": sliding_window, "dropout": dropout, **seen}
            )
            b, h, t = query.shape[:3]
            return query.new_zeros(b, t, h, value.shape[-1]), None
        # We train on full, unpadded sequences: the causal mask (within the layer's sliding
        # window, if it has one) is the whole mask, so HF's mask tensor is not needed (and not
        # built, see the mask registration below). What else a call may ask for was seen when
        # the model was built (`_probe_attention`).
        n_rep = query.shape[1] // key.shape[1]
        if n_rep > 1:  # grouped-query attention: expand kv heads as workers/models/llama.py does
            key, value = key.repeat_interleave(n_rep, dim=1), value.repeat_interleave(n_rep, dim=1)
        out = attend(
            query,
            key,
            value,
            backend,
            scale=scaling,
            softcap=softcap,
            window=sliding_window,
            dropout_p=dropout,
        )
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register(ATTN_NAME, attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface

        AttentionMaskInterface.register(ATTN_NAME, lambda *args, **kwargs: None)
    except ImportError:  # older transformers: it builds a mask we ignore
        pass


def _probe_attention(inner: nn.Module) -> list[dict[str, Any]]:
    """What each attention call of a training forward asks for (its cap, window, dropout, and
    anything the hook cannot apply), from a two-token forward in which the hook only records:
    transformers decides these per layer, and its config fields for them differ by model."""
    global _PROBE
    device = next(inner.parameters()).device
    was_training, _PROBE = inner.training, []
    try:
        inner.train()  # dropout is passed only in training
        with torch.no_grad():
            inner(input_ids=torch.zeros(1, 2, dtype=torch.long, device=device), use_cache=False)
        return _PROBE
    finally:
        _PROBE = None
        inner.train(was_training)


def _attention_refusal(calls: list[dict[str, Any]], model_type: str) -> str | None:
    """Why the hook cannot run this model's attention as transformers would, or None: no call
    came through it (the knob would change nothing), or a call asks for what `attend` does not
    apply (the model would train as another)."""
    if not calls:
        return (
            f"{model_type}'s attention never called the autotuner's attention hook, so the "
            "attention knob would change nothing: this architecture is not supported"
        )
    for call in calls:
        for name, what in _NOT_APPLIED.items():
            if call.get(name) is not None:
                return (
                    f"{model_type}'s attention uses {what} ({name}), which the autotuner's "
                    "attention does not apply: this architecture is not supported yet"
                )
        if call.get("is_causal") is False:
            return (
                f"{model_type}'s attention is not causal, and the autotuner trains causal "
                "language models: this architecture is not supported"
            )
    return None


def _check_attention(
    calls: list[dict[str, Any]], attention: Attention, model_type: str, seq_len: int
) -> tuple[float | None, set[int]]:
    """The logit cap and the sliding windows shorter than `seq_len` the calls ask for, once the
    `attention` knob is known to apply them: the support table's verdict, on what transformers
    passes rather than on config fields."""
    refusal = _attention_refusal(calls, model_type)
    if refusal is not None:
        raise UnsupportedConfig(refusal, {})  # {}: the model's, whatever the knobs
    caps = {c["softcap"] for c in calls if c["softcap"] is not None}
    windows = {w for c in calls if (w := c["sliding_window"]) is not None and w < seq_len}
    verdict = attention_verdict(
        attention,
        cap=max(caps) if caps else None,
        window=min(windows) if windows else None,
        dropout=max((c["dropout"] or 0.0) for c in calls),
        seq_len=seq_len,
    )
    if verdict is not None:
        raise UnsupportedConfig(verdict.message, verdict.knobs)
    return (max(caps) if caps else None), windows


# Config fields that scale the logits in ways the fused loss does not know: such a model keeps
# its own output layer and loss (kernels 'none').
_LOGIT_SCALES = ("logit_scale", "logits_scaling", "output_multiplier_scale")


class HFCausalLM(nn.Module):
    """Wraps a transformers model so it has the built-in families' forward(idx, targets) -> loss."""

    def __init__(
        self,
        inner: nn.Module,
        kernels: Kernels = Kernels.NONE,
        attention_spans: list[int] | None = None,
    ):
        super().__init__()
        self.inner, self.kernels = inner, kernels
        # The keys each attention layer's queries span, where a sliding window makes that
        # fewer than the sequence for some (None: the whole sequence each): the FLOPs MFU
        # counts (autotuner/flops.py).
        self.attention_spans = attention_spans
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
    chunk = getattr(config, "attention_chunk_size", None)
    if chunk is not None and chunk < spec.seq_len:
        # Llama 4's local layers attend within chunks through the mask, which the hook does not
        # build: no call would say so.
        raise UnsupportedConfig(
            f"{model_type} attends within {chunk}-token chunks, which the autotuner's attention "
            f"does not apply: use seq_len <= {chunk}",
            {},
        )
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
    calls = _probe_attention(inner)
    cap, windows = _check_attention(calls, attention, model_type, spec.seq_len)
    spans = [min(c["sliding_window"] or spec.seq_len, spec.seq_len) for c in calls]
    for window in windows or {None}:  # flex's block masks and score function for what it asks
        prepare(attention, spec.seq_len, torch.get_default_device(), cap, window)
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
    return HFCausalLM(inner, kernels, attention_spans=spans if windows else None)


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
