"""The knobs: what the training run being tuned sets, one typed value each (`Knobs`), and the
stable string of a knob assignment."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, model_validator

from autotuner.spec.base import _Record


class Precision(StrEnum):
    FP32 = "fp32"  # plain fp32 matmuls (TF32 off)
    TF32 = "tf32"  # fp32 weights, TF32 tensor-core matmuls
    FP16 = "fp16"  # fp16 autocast + dynamic loss scaling (GradScaler)
    BF16 = "bf16"  # bf16 autocast, fp32 master weights
    FP8_TENSORWISE = (
        "fp8-tensorwise"  # torchao float8 training, tensorwise scaling (+ bf16 autocast)
    )
    FP8_ROWWISE = "fp8-rowwise"  # torchao float8 training, rowwise scaling (+ bf16 autocast)

    @property
    def is_half(self) -> bool:
        return self not in (Precision.FP32, Precision.TF32)

    @property
    def is_fp8(self) -> bool:
        return self in (Precision.FP8_TENSORWISE, Precision.FP8_ROWWISE)


class CompileMode(StrEnum):
    NONE = "none"
    DEFAULT = "default"
    REDUCE_OVERHEAD = "reduce-overhead"
    MAX_AUTOTUNE_NO_CUDAGRAPHS = "max-autotune-no-cudagraphs"
    MAX_AUTOTUNE = "max-autotune"


class Attention(StrEnum):
    MATH = "math"  # SDPA math backend (reference; materialises the score matrix)
    EFFICIENT = "efficient"  # SDPA memory-efficient backend
    FLASH = "flash"  # SDPA flash backend (fp16/bf16 only)
    CUDNN = "cudnn"  # SDPA cuDNN backend (fp16/bf16, Hopper/Ampere)
    FLEX = "flex"  # FlexAttention with a causal block mask (needs torch.compile to be fast)


class CompileScope(StrEnum):
    """What `torch.compile` wraps (inactive when compile_mode is none)."""

    MODEL = "model"  # the whole model: one graph per step (the loss and output layer included)
    # Each repeated transformer block compiled on its own (regional compilation, as torchtitan
    # compiles its blocks): one block's graph is traced once and reused by every layer, so the
    # compile takes a fraction of the whole model's; the embedding, final norm, output layer and
    # loss run eagerly.
    BLOCK = "block"


class Kernels(StrEnum):
    """Fused kernels from Liger-Kernel or Apple's cut-cross-entropy (Triton, CUDA only)."""

    NONE = "none"
    # The output layer and the cross-entropy in one chunked kernel: the logits (micro-batch x
    # sequence x vocab, kept in fp32 for the loss) are never materialised, which frees the
    # largest single activation of a large-vocabulary model.
    FUSED_CE = "fused-ce"
    # fused-ce plus Liger's RMSNorm/LayerNorm, SwiGLU and RoPE kernels (for a Hugging Face
    # model: the architectures Liger patches, `liger_kernel.transformers`).
    LIGER = "liger"
    # The output layer and the cross-entropy in cut-cross-entropy's kernels (Apple, "Cut Your
    # Losses in Large-Vocabulary Language Models"): the logits are never written to memory at
    # all, not even a chunk (the log-sum-exp is reduced on chip, and backward recomputes the
    # logits block by block). Its backward needs half-precision inputs.
    CCE = "cce"

    @property
    def package(self) -> str | None:
        """The module the worker imports for these kernels (None: no kernels)."""
        return {Kernels.NONE: None, Kernels.CCE: "cut_cross_entropy"}.get(self, "liger_kernel")


class Checkpointing(StrEnum):
    NONE = "none"
    SELECTIVE = "selective"  # recompute the attention/MLP inner activations, keep block outputs
    FULL = "full"  # recompute every transformer block in backward


class Optimizer(StrEnum):
    ADAMW_FOREACH = "adamw-foreach"
    ADAMW_FUSED = "adamw-fused"
    # torchao's AdamW8bit: both moments in 8 bits with an fp32 scale per 256 values (2 B/param
    # where fp32 moments take 8), fp32 weights and update math: what frees Llama 8B on one H200
    # from full checkpointing. It changes numerics, so a winner with it gets the numerics check.
    ADAMW_8BIT = "adamw-8bit"

    @property
    def state_bytes_per_param(self) -> float:
        """Bytes of optimizer state per parameter (exp_avg and exp_avg_sq)."""
        return 2.0 * (1.0 + 4.0 / 256) if self == Optimizer.ADAMW_8BIT else 8.0


class Knobs(_Record):
    """The values one trial applies. Every field must really change what runs."""

    micro_batch_size: int = Field(default=1, ge=1, le=4096)
    grad_accum: int = Field(default=1, ge=1, le=4096)
    precision: Precision = Precision.BF16
    compile_mode: CompileMode = CompileMode.NONE
    attention: Attention = Attention.EFFICIENT
    checkpointing: Checkpointing = Checkpointing.NONE
    compile_scope: CompileScope = CompileScope.MODEL
    kernels: Kernels = Kernels.NONE
    optimizer: Optimizer = Optimizer.ADAMW_FUSED
    vocab_pad_multiple: Literal[1, 64, 128] = 1
    # The CUDA caching allocator's mode (PYTORCH_CUDA_ALLOC_CONF, set before CUDA starts):
    # `expandable` maps one growing segment per stream instead of one cudaMalloc per request, so
    # freed blocks of different sizes coalesce. By default the allocator reserved 3-16% more
    # than it allocated on the H200 (Llama 8B with 8-bit AdamW at micro-batch 1: 121.5 GiB
    # reserved for 105.1 allocated), memory the headroom has to count.
    allocator: Literal["default", "expandable"] = "default"
    # The input pipeline's settings (a torch DataLoader): active when the measurement reads
    # through the loader (MeasureSettings.data_source `loader` or `file`).
    loader_workers: int = Field(default=2, ge=0, le=64)
    pin_memory: bool = True
    prefetch_factor: int = Field(default=2, ge=1, le=64)
    # Multi-GPU settings (inactive with one GPU). NCCL values become environment variables of
    # the rank processes only, set before torch is imported; None / "default" leaves NCCL's own
    # choice.
    nccl_algo: Literal["default", "Ring", "Tree"] = "default"
    nccl_proto: Literal["default", "Simple", "LL", "LL128"] = "default"
    nccl_min_channels: int | None = Field(default=None, ge=1, le=64)
    nccl_max_channels: int | None = Field(default=None, ge=1, le=64)  # NCCL_MAX_NCHANNELS
    nccl_buffsize: int | None = Field(default=None, ge=65536, le=1 << 30)  # NCCL_BUFFSIZE, bytes
    # How the model is spread over the ranks (workers/distributed.py):
    #   ddp               DistributedDataParallel: full replicas, gradients all-reduced in buckets
    #   fsdp2             fully_shard per block and root, params re-sharded after forward (ZeRO-3)
    #   fsdp2-no-reshard  fully_shard with reshard_after_forward=False (ZeRO-2-like: no
    #                     all-gather again in backward, unsharded params kept until then)
    #   hsdp              replicate across nodes, shard within: refused (needs several nodes)
    parallel: Literal["ddp", "fsdp2", "fsdp2-no-reshard", "hsdp"] = "ddp"
    # DDP only.
    ddp_bucket_cap_mb: int = Field(default=25, ge=1, le=1024)
    ddp_grad_as_bucket_view: bool = False  # gradients alias the all-reduce buckets (no copy)
    ddp_static_graph: bool = False  # the same parameters are used every step (skip re-checks)
    # DDP communication hook: fp16/bf16 compress the buckets before the all-reduce (torch's
    # default_hooks); powersgd is low-rank PowerSGD (rank 1, error feedback).
    grad_compression: Literal["none", "fp16", "bf16", "powersgd"] = "none"
    # FSDP2 only: the dtype gradients are reduce-scattered in (the parameter all-gather dtype
    # follows `precision`: bf16 for bf16/fp8, fp32 otherwise).
    fsdp_reduce_dtype: Literal["fp32", "bf16"] = "fp32"

    @model_validator(mode="before")
    @classmethod
    def _drop_legacy_settings(cls, data: Any) -> Any:
        # Stored configs may carry data_source among their knobs (it is a measurement setting):
        # older database rows, and the recorded landscapes and studies in bench/results/ that
        # the replay and the benchmarks read, which no database migration reaches. They must
        # read back (TrialConfig moves it into `measure`). A space that names it as a knob is
        # refused earlier, in search/space.py, with the fix.
        if isinstance(data, dict) and LEGACY_KNOBS & data.keys():
            data = {k: v for k, v in data.items() if k not in LEGACY_KNOBS}
        return data

    @classmethod
    def knob_names(cls) -> list[str]:
        return list(cls.model_fields)


# Names stored configs may carry among their knobs that are measurement settings (MeasureSettings).
LEGACY_KNOBS = frozenset({"data_source"})


# json.dumps with these arguments builds an encoder per call: a third of the key's cost, and the
# end of a study keys every trial (50,000). The same encoder, built once, writes the same text.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def canonical_params(params: dict[str, Any]) -> str:
    """A stable string for a knob assignment (dedupe, landscape lookups)."""
    return _CANONICAL.encode(params)
