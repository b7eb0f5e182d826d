"""Compatibility rules: combinations that cannot run on the target, removed before launch.

Each rule returns a remedy-style reason, so a pruned trial says what to change. Space-specific
rules (`rules:` in a space file) apply on top of these built-in ones.
"""

from __future__ import annotations

from autotuner.executors.base import Target
from autotuner.spec import Attention, CompileMode, Knobs, Precision


def incompatibility(knobs: Knobs, target: Target) -> str | None:
    """Why these knobs cannot run on the target, or None when they can."""
    on_cpu = target.device_type == "cpu"
    if knobs.attention in (Attention.FLASH, Attention.CUDNN):
        if on_cpu and knobs.attention == Attention.CUDNN:
            return "cuDNN attention needs a CUDA GPU; use math or flash on the CPU"
        if not on_cpu and not knobs.precision.is_half:
            return (
                f"{knobs.attention.value} attention needs fp16 or bf16; not {knobs.precision.value}"
            )
    if on_cpu and knobs.attention == Attention.EFFICIENT:
        return "the memory-efficient SDPA kernel needs a CUDA GPU; use math or flash on the CPU"
    if knobs.precision.is_fp8:
        if on_cpu:
            return "fp8 training needs a CUDA GPU with compute capability >= 8.9"
        cc = target.compute_capability
        if cc is not None and cc < (8, 9):
            return f"fp8 training needs compute capability >= 8.9; this GPU has {cc[0]}.{cc[1]}"
    if on_cpu and knobs.precision == Precision.FP16:
        return "fp16 with loss scaling is a GPU mode; use fp32 or bf16 on the CPU"
    if on_cpu and knobs.compile_mode == CompileMode.REDUCE_OVERHEAD:
        return "reduce-overhead uses CUDA graphs, which need a CUDA GPU"
    return None
