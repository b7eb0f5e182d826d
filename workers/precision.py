"""The precision knob: matmul flags, autocast, loss scaling and float8 conversion.

| precision      | weights | matmuls                         | extra                        |
| fp32           | fp32    | fp32 (TF32 off)                 |                              |
| tf32           | fp32    | TF32 tensor cores (CUDA only)   |                              |
| fp16           | fp32    | fp16 autocast                   | torch.amp.GradScaler         |
| bf16           | fp32    | bf16 autocast                   |                              |
| fp8-tensorwise | fp32    | torchao float8 Linear + bf16    | tensorwise scales            |
| fp8-rowwise    | fp32    | torchao float8 Linear + bf16    | rowwise scales               |
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

from autotuner.spec import Precision
from workers.errors import UnsupportedConfig

# The modules float8 training leaves in bf16: the output layer (its weight is tied to the
# embedding, and the vocab is rarely a multiple of 16).
_FP8_SKIP = ("lm_head", "output", "inner.lm_head")


def set_matmul_precision(precision: Precision, device_type: str) -> None:
    """Process-level fp32 matmul mode; set before the model is built."""
    if device_type != "cuda" or precision == Precision.FP32:
        # "highest" = no TF32. On the CPU "high" would let oneDNN use reduced-precision fp32
        # matmuls, which no precision value asks for.
        torch.set_float32_matmul_precision("highest")
    else:
        # tf32 by definition; the half precisions too (as nanoGPT): the few fp32 matmuls autocast
        # leaves (none in these models' hot path) may use TF32.
        torch.set_float32_matmul_precision("high")


def autocast_dtype(precision: Precision) -> torch.dtype | None:
    if precision == Precision.FP16:
        return torch.float16
    if precision.is_half:  # bf16 and both fp8 recipes (float8 Linear layers take bf16 inputs)
        return torch.bfloat16
    return None


def autocast(precision: Precision, device_type: str) -> contextlib.AbstractContextManager:
    """The forward's autocast context (a null context for fp32/tf32)."""
    dtype = autocast_dtype(precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=dtype)


def grad_scaler(precision: Precision, device_type: str) -> torch.amp.GradScaler | None:
    """fp16 needs dynamic loss scaling so small gradients do not flush to zero."""
    if precision != Precision.FP16:
        return None
    return torch.amp.GradScaler(device_type)


def _fp8_filter(module: nn.Module, fqn: str) -> bool:
    if not isinstance(module, nn.Linear) or fqn in _FP8_SKIP:
        return False
    # torch._scaled_mm needs both dims to be multiples of 16.
    return module.in_features % 16 == 0 and module.out_features % 16 == 0


def convert_fp8(model: nn.Module, precision: Precision) -> int:
    """Swap eligible nn.Linear layers for torchao Float8Linear in place; returns how many."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as exc:
        raise UnsupportedConfig(
            f"{precision.value} needs torchao on the worker: pip install torchao "
            "(or drop fp8 from the space)",
            {"precision": precision.value},
        ) from exc
    recipe = "tensorwise" if precision == Precision.FP8_TENSORWISE else "rowwise"
    config = Float8LinearConfig.from_recipe_name(recipe)
    convert_to_float8_training(model, config=config, module_filter_fn=_fp8_filter)
    converted = sum(1 for m in model.modules() if type(m).__name__ == "Float8Linear")
    if converted == 0:
        raise UnsupportedConfig(
            f"{precision.value}: no Linear layer has both dims divisible by 16, so float8 would "
            "change nothing; use bf16 for this model",
            {"precision": precision.value},
        )
    return converted
