"""Model builders. `build_model(spec, knobs)` returns an fp32 nn.Module on the CPU whose
forward(idx, targets) returns the mean next-token loss; the trial moves it to the device.

The knobs that shape the model are applied here, at build time: vocab padding, the attention
backend, activation checkpointing, the fused kernels. Precision (autocast, float8) and
torch.compile wrap the built model in workers/precision.py and workers/compiling.py.
"""

from __future__ import annotations

import torch.nn as nn

from autotuner.spec import Kernels, Knobs, ModelFamily, ModelSpec


def padded_vocab_size(vocab_size: int, multiple: int) -> int:
    """Rows in the embedding/output layer: vocab_size rounded up to `multiple`.

    Padding (e.g. GPT-2's 50257 -> 50304) gives the output matmul tensor-core friendly shapes;
    the padded rows never receive a target, so the loss is the unpadded model's loss.
    """
    return -(-vocab_size // multiple) * multiple


def build_model(spec: ModelSpec, knobs: Knobs) -> nn.Module:
    """Build the model the spec describes, with the knobs that change its structure applied."""
    import torch

    from workers.models.attention import prepare

    # The causal mask; a Hugging Face model's cap and windows are prepared as its attention
    # calls ask for them (workers/models/hf.py).
    prepare(knobs.attention, spec.seq_len, torch.get_default_device())
    kwargs = dict(
        padded_vocab=padded_vocab_size(spec.vocab_size, knobs.vocab_pad_multiple),
        attention=knobs.attention,
        checkpointing=knobs.checkpointing,
    )
    if spec.family == ModelFamily.GPT2:
        from workers.models.gpt import GPT

        return GPT(spec, **kwargs, kernels=knobs.kernels)
    if spec.family == ModelFamily.LLAMA:
        from workers.models.llama import Llama

        return Llama(spec, **kwargs, kernels=knobs.kernels)
    if spec.family == ModelFamily.FACTORY:
        from workers.errors import UnsupportedConfig
        from workers.models.factory import build_factory

        if knobs.kernels != Kernels.NONE:
            # The factory's model returns logits: the output layer is inside code we do not see.
            raise UnsupportedConfig(
                f"kernels {knobs.kernels.value!r} fuse the output layer into the loss, and a "
                "factory model returns logits; use kernels 'none' for family 'factory'",
                {"kernels": knobs.kernels.value},
            )
        return build_factory(spec, **kwargs)
    from workers.models.hf import build_hf

    return build_hf(spec, **kwargs, kernels=knobs.kernels)
