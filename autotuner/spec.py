"""The records that join the control plane (`autotuner/`) and the data plane (`workers/`).

`TrialConfig` says what one trial runs; `TrialResult` says what happened. Both are plain,
versioned, JSON round-trippable pydantic models, stored verbatim beside the indexed columns.
Everything else can change on one side without the other as long as these two hold.

This module imports nothing heavy (no torch, no NVML): the CLI and service import it.

One module over the size rule on purpose: it is the contract with `workers/`, and both sides
import this one file, so a change to the records is one diff that both planes see.
"""

from __future__ import annotations

import hashlib
import json
import re
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from autotuner.presets import MODEL_PRESETS

SCHEMA_VERSION: Literal[1] = 1


class _Record(BaseModel):
    """Strict base: unknown keys are errors (a typo must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=False, validate_assignment=True)


# --------------------------------------------------------------------------- model spec


class ModelFamily(StrEnum):
    GPT2 = "gpt2"  # LayerNorm, GELU MLP, learned positions, tied embeddings
    LLAMA = "llama"  # RMSNorm, SwiGLU, RoPE, grouped-query attention
    HF = "hf"  # any Hugging Face causal-LM config, built with from_config (no weights)
    FACTORY = "factory"  # the user's own model: a Python function building an nn.Module


# "pkg.module:function" or "some/file.py:function"; the function part may be dotted (Class.build).
_FACTORY_PATTERN = r"^([A-Za-z_][\w.]*|[^:]+\.py):[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$"


class ModelSpec(_Record):
    """A transformer to tune: a preset name, explicit sizes, or a Hugging Face config.

    Written by users in YAML/JSON. `ModelSpec.resolve(data)` fills a preset's sizes and lets
    explicit fields override them (e.g. `preset: gpt2-124m` with `seq_len: 2048`).
    """

    family: ModelFamily
    preset: str | None = None
    n_layer: int = Field(gt=0, le=1024)
    d_model: int = Field(gt=0, le=65536)
    n_head: int = Field(gt=0, le=1024)
    n_kv_head: int | None = Field(default=None, gt=0, le=1024)
    d_ff: int | None = Field(default=None, gt=0, le=1_048_576)
    vocab_size: int = Field(gt=0, le=4_194_304)
    seq_len: int = Field(gt=0, le=1_048_576)
    tie_embeddings: bool = True
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    # For family "hf": the config.json contents (model_type, sizes...). Built with
    # transformers' AutoModelForCausalLM.from_config on the worker; no weights are fetched.
    # Only ever a mapping here: a spec file may name a file instead, which the client reads
    # and inlines (autotuner/inputs.py), so the service never opens a client's path.
    hf_config: dict[str, Any] | None = None
    # The shapes below are what the control side counts (parameters, FLOPs, memory) and are
    # read from hf_config by _sizes_from_hf; the worker builds the model from hf_config itself
    # and never reads them. All optional: a spec without them is the dense model it always was.
    # The width of one attention head where it is not d_model / n_head (the config's head_dim):
    # Gemma 2 2B runs 8 heads of 256 on a 2304-wide residual stream, Qwen3-30B-A3B 32 of 128 on
    # 2048, so q and the attention output are n_head * head_size wide, not d_model.
    head_size: int | None = Field(default=None, gt=0, le=4096)
    # Biases on the query, key and value projections (Qwen2 has them; Llama's attention_bias
    # also biases the output projection, d_model values a layer that are not counted).
    qkv_bias: bool = False
    # Mixture of experts: `moe_layers` of the n_layer layers (all, by default) replace the
    # dense MLP by a router over `n_experts` SwiGLU experts of width `d_ff_expert`, of which
    # `n_experts_active` run for each token, plus an always-on shared expert of width
    # `d_ff_shared` where the model has one (Qwen2-MoE). Memory counts every expert; FLOPs per
    # token count the active ones (autotuner/flops.py). The other layers keep a dense MLP of
    # width d_ff.
    n_experts: int | None = Field(default=None, ge=1, le=65536)
    n_experts_active: int | None = Field(default=None, ge=1, le=65536)
    d_ff_expert: int | None = Field(default=None, gt=0, le=1_048_576)
    d_ff_shared: int | None = Field(default=None, gt=0, le=1_048_576)
    moe_layers: int | None = Field(default=None, ge=0, le=1024)
    # For family "factory" (docs/models.md): "package.module:function", or "path/to/file.py:
    # function" (a relative path is resolved against the model spec file's folder when read from
    # a file). Imported and called in the trial process with the sizes above it accepts as
    # keyword arguments, plus `factory_args`; it returns an nn.Module mapping token ids (B, T) to
    # logits (B, T, vocab_size). n_layer, d_model and n_head stay required: the control side's
    # memory model and limits read them as a Llama-style transformer's shapes (estimates).
    factory: str | None = Field(default=None, max_length=1000)
    factory_args: dict[str, Any] | None = None
    # Set by the service, never by the user (autotuner/study/factory_access.py): the operator's
    # allowed directory (resolved) the factory was found under. The worker imports the factory
    # from there and refuses it if the imported file lies elsewhere. None: any importable
    # factory, as `tune` runs the user's own code.
    factory_root: str | None = Field(default=None, max_length=4096)

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelSpec:
        if self.head_size is None and self.d_model % self.n_head:
            raise ValueError(
                f"n_head={self.n_head} must divide d_model={self.d_model}; "
                f"pick n_head from the divisors of d_model "
                f"(e.g. {_divisors_near(self.d_model, self.n_head)})"
            )
        kv = self.n_kv_head or self.n_head
        if self.n_head % kv:
            raise ValueError(
                f"n_kv_head={kv} must divide n_head={self.n_head} (grouped-query attention shares "
                f"each key/value head among n_head/n_kv_head query heads)"
            )
        if self.family == ModelFamily.HF and not self.hf_config:
            raise ValueError("family 'hf' needs hf_config: the model's config.json as a mapping")
        if (self.family == ModelFamily.FACTORY) != (self.factory is not None):
            raise ValueError(
                "family 'factory' needs factory: 'package.module:function' (or 'file.py:function'),"
                " and `factory` needs family 'factory'"
            )
        if self.factory is not None and not re.fullmatch(_FACTORY_PATTERN, self.factory):
            raise ValueError(
                f"factory {self.factory!r}: write 'package.module:function' (importable on the "
                "worker) or 'path/to/file.py:function'"
            )
        if self.factory_root is not None and self.factory is None:
            raise ValueError("factory_root goes with a factory; drop it")
        if self.factory_args is not None and self.family != ModelFamily.FACTORY:
            raise ValueError("factory_args are for family 'factory' only")
        clash = set(self.factory_args or {}) & FACTORY_SIZE_ARGS
        if clash:
            raise ValueError(
                f"factory_args {sorted(clash)} are model sizes: give them as top-level fields"
            )
        if self.family == ModelFamily.GPT2 and self.n_kv_head not in (None, self.n_head):
            raise ValueError(
                "family 'gpt2' has no grouped-query attention; drop n_kv_head or use family 'llama'"
            )
        self._check_hf_shapes()
        self._check_moe()
        return self

    def _check_hf_shapes(self) -> None:
        # The built-in families build d_model / n_head-wide heads without biases, and a
        # factory gets none of these sizes: counting them there would count a model that
        # does not run.
        if self.family == ModelFamily.HF:
            return
        given = [name for name in ("head_size", "qkv_bias") if getattr(self, name)]
        if given:
            raise ValueError(
                f"{', '.join(given)}: read from a Hugging Face config (family 'hf'); the "
                f"'{self.family.value}' family builds d_model / n_head-wide heads without biases"
            )

    def _check_moe(self) -> None:
        moe = {
            name: getattr(self, name)
            for name in (
                "n_experts",
                "n_experts_active",
                "d_ff_expert",
                "d_ff_shared",
                "moe_layers",
            )
            if getattr(self, name) is not None
        }
        if not moe:
            return
        if self.family != ModelFamily.HF:
            raise ValueError(
                f"{', '.join(moe)}: mixture-of-experts sizes are for family 'hf' (the built-in "
                "families have dense MLPs); give the model's config.json as hf_config"
            )
        if self.n_experts is None or self.n_experts_active is None:
            raise ValueError(
                "a mixture of experts needs both n_experts (routed experts per layer) and "
                "n_experts_active (experts per token); in a config.json: num_experts or "
                "num_local_experts, and num_experts_per_tok"
            )
        if self.n_experts_active > self.n_experts:
            raise ValueError(
                f"n_experts_active={self.n_experts_active} is more than n_experts="
                f"{self.n_experts}: a token is routed to at most every expert"
            )
        if self.moe_layers is not None and self.moe_layers > self.n_layer:
            raise ValueError(f"moe_layers={self.moe_layers} is more than n_layer={self.n_layer}")

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def ffn_dim(self) -> int:
        if self.d_ff:
            return self.d_ff
        if self.family == ModelFamily.LLAMA:
            # Llama's convention: 2/3 of 4*d, rounded up to a multiple of 256.
            hidden = int(2 * 4 * self.d_model / 3)
            return 256 * ((hidden + 255) // 256)
        return 4 * self.d_model

    @property
    def head_dim(self) -> int:
        return self.head_size or self.d_model // self.n_head

    @property
    def q_dim(self) -> int:
        """Width of the queries and of the attention output (d_model unless head_size says
        otherwise)."""
        return self.n_head * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.n_experts is not None

    @property
    def expert_ffn_dim(self) -> int:
        """Width of one routed expert's MLP (the dense width where the config names none)."""
        return self.d_ff_expert or self.ffn_dim

    @property
    def moe_layer_count(self) -> int:
        """Layers whose MLP is a mixture of experts: 0 for a dense model."""
        if not self.is_moe:
            return 0
        return self.n_layer if self.moe_layers is None else self.moe_layers

    @classmethod
    def resolve(cls, data: dict[str, Any]) -> ModelSpec:
        """Build a spec from user data, expanding `preset` and applying overrides."""
        if not isinstance(data, dict):
            raise ValueError(f"a model spec must be a mapping, got {type(data).__name__}")
        data = dict(data)
        preset = data.get("preset")
        if preset is not None:
            if preset not in MODEL_PRESETS:
                known = ", ".join(sorted(MODEL_PRESETS))
                raise ValueError(f"unknown preset {preset!r}; known presets: {known}")
            merged = dict(MODEL_PRESETS[preset])
            merged.update({k: v for k, v in data.items() if v is not None})
            data = merged
        elif "hf_config" in data and "family" not in data:
            data["family"] = "hf"
        elif "factory" in data and "family" not in data:
            data["family"] = "factory"
        if isinstance(data.get("hf_config"), str):
            raise ValueError(
                f"hf_config {data['hf_config']!r} is a file name: only a spec file read by the "
                "client (`autotuner tune` or `submit` with the file) may name one, and the "
                "client sends its contents; send the config.json contents as a mapping"
            )
        if data.get("family") == "hf" and isinstance(data.get("hf_config"), dict):
            data = {**_sizes_from_hf(data["hf_config"]), **data}
        return cls.model_validate(data)

    def describe(self) -> str:
        name = self.preset or self.factory or self.family.value
        heads = f"{self.n_head} heads" + (f" of {self.head_size}" if self.head_size else "")
        mlp = f"ffn {self.ffn_dim}"
        if self.is_moe:
            mlp = (
                f"{self.n_experts} experts of {self.expert_ffn_dim} ({self.n_experts_active} a "
                f"token{f', shared {self.d_ff_shared}' if self.d_ff_shared else ''})"
            )
        return (
            f"{name}: {self.n_layer} layers, d_model {self.d_model}, {heads}"
            f"{'' if self.kv_heads == self.n_head else f' ({self.kv_heads} kv)'}, "
            f"{mlp}, vocab {self.vocab_size}, seq {self.seq_len}"
        )


# The sizes a factory may declare as keyword arguments (workers/models/factory.py passes those
# its signature names, or all of them to a **kwargs); `attend` is the attention hook.
FACTORY_SIZE_ARGS = frozenset(
    {
        "vocab_size",
        "seq_len",
        "n_layer",
        "d_model",
        "n_head",
        "n_kv_head",
        "d_ff",
        "dropout",
        "tie_embeddings",
        "attend",
    }
)


def _divisors_near(n: int, around: int) -> list[int]:
    divs = [d for d in range(1, min(n, 1024) + 1) if n % d == 0]
    return sorted(divs, key=lambda d: abs(d - around))[:3]


# Model types whose transformers config class unties the output layer from the embedding when
# config.json does not say (PretrainedConfig's own default, and Gemma's, is tied).
# tests/unit/test_hf_param_counts.py checks this list against the installed transformers.
_UNTIED_BY_DEFAULT = frozenset(
    {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "olmoe"}
)
# Model types whose attention always has biases on q, k and v (no config key says so).
_QKV_BIAS_MODEL_TYPES = frozenset({"qwen2", "qwen2_moe"})


def _sizes_from_hf(cfg: dict[str, Any]) -> dict[str, Any]:
    """Read the shapes the control side counts from a Hugging Face config.json (the names vary
    by model type; docs/models.md lists what is read)."""

    def pick(*names: str) -> Any:
        for name in names:
            if cfg.get(name) is not None:
                return cfg[name]
        return None

    model_type = cfg.get("model_type")
    tied = pick("tie_word_embeddings")
    if tied is None and isinstance(model_type, str):
        tied = model_type not in _UNTIED_BY_DEFAULT
    out = {
        "n_layer": pick("num_hidden_layers", "n_layer", "num_layers"),
        "d_model": pick("hidden_size", "n_embd", "d_model"),
        "n_head": pick("num_attention_heads", "n_head"),
        "n_kv_head": pick("num_key_value_heads"),
        "d_ff": pick("intermediate_size", "n_inner", "ffn_dim"),
        "vocab_size": pick("vocab_size"),
        "seq_len": pick("max_position_embeddings", "n_positions", "n_ctx"),
        "tie_embeddings": tied,
        "head_size": pick("head_dim"),
        "qkv_bias": model_type in _QKV_BIAS_MODEL_TYPES or bool(pick("attention_bias")) or None,
        **_moe_sizes_from_hf(cfg, pick),
    }
    missing = [k for k in ("n_layer", "d_model", "n_head", "vocab_size") if out[k] is None]
    if missing:
        raise ValueError(
            f"hf_config lacks {', '.join(missing)}; give them in hf_config (e.g. "
            f"num_hidden_layers, hidden_size, num_attention_heads, vocab_size) or top-level"
        )
    return {k: v for k, v in out.items() if v is not None}


def _moe_sizes_from_hf(cfg: dict[str, Any], pick: Any) -> dict[str, Any]:
    """The mixture-of-experts shapes, under the names transformers' MoE configs use: Qwen2-MoE
    and Qwen3-MoE (num_experts, moe_intermediate_size, shared_expert_intermediate_size,
    decoder_sparse_step, mlp_only_layers), OLMoE (num_experts, experts as wide as
    intermediate_size), Mixtral (num_local_experts). Empty for a dense model."""
    n_experts = pick("num_experts", "num_local_experts")
    if not n_experts:  # absent, or 0: Qwen2-MoE's way of writing a dense model
        return {}
    n_layer = pick("num_hidden_layers", "n_layer", "num_layers")
    # Qwen2/3-MoE: layer i is MoE unless it is listed in mlp_only_layers, and only every
    # decoder_sparse_step-th layer is ((i + 1) % step == 0).
    step = pick("decoder_sparse_step") or 1
    dense_only = set(pick("mlp_only_layers") or ())
    moe_layers = None
    if isinstance(n_layer, int) and (step != 1 or dense_only):
        moe_layers = sum(1 for i in range(n_layer) if i not in dense_only and (i + 1) % step == 0)
    return {
        "n_experts": n_experts,
        "n_experts_active": pick("num_experts_per_tok"),
        "d_ff_expert": pick("moe_intermediate_size", "intermediate_size"),
        "d_ff_shared": pick("shared_expert_intermediate_size") or None,
        "moe_layers": moe_layers,
    }


# --------------------------------------------------------------------------- knobs


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
    """Fused kernels from Liger-Kernel (Triton, CUDA only)."""

    NONE = "none"
    # The output layer and the cross-entropy in one chunked kernel: the logits (micro-batch x
    # sequence x vocab, kept in fp32 for the loss) are never materialised, which frees the
    # largest single activation of a large-vocabulary model.
    FUSED_CE = "fused-ce"
    # fused-ce plus Liger's RMSNorm/LayerNorm, SwiGLU and RoPE kernels (for a Hugging Face
    # model: the architectures Liger patches, `liger_kernel.transformers`).
    LIGER = "liger"


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


class Device(StrEnum):
    AUTO = "auto"  # cuda when a GPU is visible, else cpu
    CUDA = "cuda"
    CPU = "cpu"


class DataSource(StrEnum):
    """What the measured steps read (a setting of the measurement, not a knob: a training run
    reads its own data, it does not choose among these)."""

    SYNTHETIC = "synthetic"  # random tokens generated on the device: the data path costs nothing
    LOADER = "loader"  # a generated token file through a real torch DataLoader (the loader knobs)
    FILE = "file"  # the user's own tokens (MeasureSettings.data) through the same DataLoader


class DataFile(_Record):
    """The user's own tokens, read where the trial runs (the worker machine); never downloaded.

    - format `bin`: a flat nanoGPT-style token file (uint16, or uint32 when `dtype` or the file
      name says so, e.g. `train.uint32.bin`), memory-mapped; windows of seq_len+1 tokens.
    - format `hf`: a Hugging Face `datasets` directory written by `save_to_disk`, one sequence
      of token ids per row in `column`; a row longer than seq_len+1 is cut, a shorter one padded
      (padding is counted apart from real tokens: TrialResult.padding_share).
    - format `jsonl`: raw text, one JSON object per line with the document in `text_field`,
      tokenized on the fly in the loader by `tokenizer` (a Hugging Face `tokenizer.json`), as a
      training script that tokenizes as it reads does; each document is one sequence, cut or
      padded like an `hf` row. Tokenizing is where input pipelines most often starve a GPU.
    """

    path: str = Field(min_length=1, max_length=4096)
    # auto: a directory is `hf`, a .jsonl/.json file `jsonl`, any other file `bin`
    format: Literal["auto", "bin", "hf", "jsonl"] = "auto"
    dtype: Literal["auto", "uint16", "uint32"] = "auto"  # `bin` only
    column: str = Field(default="input_ids", min_length=1, max_length=200)  # `hf` only
    text_field: str = Field(default="text", min_length=1, max_length=200)  # `jsonl` only
    tokenizer: str | None = Field(default=None, min_length=1, max_length=4096)  # `jsonl` only

    @field_validator("path", "tokenizer")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(
                f"{value!r} is relative; give an absolute path (it is opened on the worker "
                "machine, whose working directory is not yours; `--data` and `--tokenizer` "
                "resolve it for you)"
            )
        return value


class MeasureSettings(_Record):
    """How a trial measures (docs/measurement.md). Defaults suit a GPU; the CPU demo shortens
    them."""

    warmup_min_steps: int = Field(default=3, ge=1, le=1000)
    warmup_max_steps: int = Field(default=30, ge=1, le=10000)
    warmup_stable_rel: float = Field(default=0.05, gt=0, le=1)
    repeats: int = Field(default=3, ge=1, le=100)
    steps_per_repeat: int | None = Field(
        default=None, ge=1, le=100000
    )  # None: auto from min_repeat_s
    min_repeat_s: float = Field(default=1.0, gt=0, le=600)
    timeout_s: float = Field(default=900.0, gt=0, le=86400)
    telemetry_hz: float = Field(default=10.0, ge=0, le=100)
    seed: int = 0
    device: Device = Device.AUTO
    # Caps memory for the trial (GiB): the CUDA per-process fraction on a GPU, RLIMIT_AS on the
    # CPU. None: the device's full memory. Used to model smaller GPUs and to provoke OOM in tests.
    memory_limit_gib: float | None = Field(default=None, gt=0)
    peak_flops: float | None = Field(default=None, gt=0)  # override the per-GPU peak table
    cpu_threads: int | None = Field(default=None, ge=1, le=1024)
    # Multi-GPU trials: set NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
    # NVSHMEM_DISABLE_NVLS=1 in every rank. The lent H200 machines do not support NVLink
    # multicast (NVLS) in their VMs; left on, NCCL/symmetric memory may try it and fail or hang
    # at init. A documented setting, not a hidden default: turn it off where NVLS works.
    disable_nvls_multicast: bool = True
    # A loss-parity trial (the numerics check of a recommendation, docs/measurement.md "fp8 and
    # other numerics changes"): None (default) runs the timing protocol. A number N trains N
    # optimizer steps from `seed` on a learnable token stream (workers/data.py ParityBatches:
    # the same tokens for every config of one model and batch shape), records every step's
    # loss in TrialResult.loss_curve and skips warm-up and the timed repeats; its tokens/s
    # counts the first (compiling) step too and is no measurement. With `headroom_check` the
    # N steps (one micro-batch each) come first and the trial then runs as measured: the
    # numerics check's candidate run and the headroom check in one process and one compile.
    parity_steps: int | None = Field(default=None, ge=2, le=100_000)
    # The measurement's input: synthetic tokens (default), the generated loader file, or the
    # user's own tokens (`data`; giving `data` alone implies data_source `file`).
    data_source: DataSource = DataSource.SYNTHETIC
    data: DataFile | None = None

    @model_validator(mode="before")
    @classmethod
    def _data_implies_file(cls, values: Any) -> Any:
        if isinstance(values, dict) and values.get("data") is not None:
            values = {"data_source": DataSource.FILE.value, **values}
        return values

    @model_validator(mode="after")
    def _data_consistent(self) -> MeasureSettings:
        if self.data_source == DataSource.FILE and self.data is None:
            raise ValueError(
                "data_source 'file' needs data: {path: /abs/tokens.bin} (or --data PATH)"
            )
        if self.data is not None and self.data_source != DataSource.FILE:
            raise ValueError(
                f"data is given but data_source is {self.data_source.value!r}; drop "
                "data_source (data implies 'file') or drop data"
            )
        return self

    # The longest a compiled trial's first step (torch.compile's tracing, codegen and, in the
    # max-autotune modes, kernel autotuning) may take: past it the trial stops itself and
    # reports `compile_error` ("compile budget"), a property of the config under this budget,
    # never retried, instead of running into timeout_s and being retried as a timeout (two
    # timeouts of a max-autotune trial cost 2 x timeout_s). With a time budget the coordinator
    # lowers it to the study's time left (workers/compile_budget.py). None: no budget.
    compile_budget_s: float | None = Field(default=None, gt=0, le=86400)
    # The headroom check of a recommendation (autotuner/search/headroom.py): after the timed
    # repeats, one evaluation forward pass (model.eval(), torch.no_grad()) and a save of the
    # model and optimizer state dicts (serialized, not written to disk), so the result's
    # peak_*_with_eval_ckpt_gib show what a real run that evaluates and checkpoints needs.
    headroom_check: bool = False
    # Stop a search trial early (docs/measurement.md "Noise"): when its first timed repeat runs
    # below this many tokens/s, the worker stops after it and reports an ok result with
    # `stopped_early` set. The coordinator sets it for search trials only (the incumbent's
    # tokens/s less a margin far beyond the noise: search/early_stop.py); None: never stop.
    abandon_below_tokens_per_s: float | None = Field(default=None, gt=0)
    # Run the attention kernel once on a tiny tensor of the trial's head shape before building
    # (workers/support.py probe_attention: an unsupported kernel is refused in a fraction of a
    # second, not after minutes of build and compile). The coordinator turns it off where a
    # trial of the study already ran the same kernel at the same attention dtype: the probe
    # can only pass again, and on the H200 it cost an eager GPT-2 trial 0.18 s of its ~4.5 s
    # (bench/results/h200_session_20261204d).
    attention_probe: bool = True


class TrialConfig(_Record):
    """What one trial runs: the model, the knob values, how to measure, how many GPUs."""

    schema_version: Literal[1] = SCHEMA_VERSION
    study_id: str | None = None
    trial_number: int | None = None
    model: ModelSpec
    knobs: Knobs = Field(default_factory=Knobs)
    measure: MeasureSettings = Field(default_factory=MeasureSettings)
    num_gpus: int = Field(default=1, ge=0, le=1024)
    # Extra environment for the trial's process (set before torch is imported).
    env: dict[str, str] = Field(default_factory=dict)
    # Deliberate faults for tests (a named, reusable fake: see workers/faults.py). Never set by
    # the search; a poisoned loss provokes `numerics`, a sleep provokes `timeout`.
    fault: Literal[
        "none",
        "nan_loss",
        "numerics_drift",
        "hang",
        "segfault",
        "exit",
        "unsupported",
        "slow_input",
    ] = "none"
    # Multi-GPU trials: the rank the fault strikes; None strikes every rank.
    fault_rank: int | None = Field(default=None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _legacy_data_source(cls, data: Any) -> Any:
        # A stored config may carry data_source among its knobs (Knobs._drop_legacy_settings
        # says which): read back, it says what that trial measured, so it moves to `measure`.
        knobs = data.get("knobs") if isinstance(data, dict) else None
        if isinstance(knobs, dict) and "data_source" in knobs:
            measure = data.get("measure")
            if isinstance(measure, dict) and "data_source" not in measure:
                data = {**data, "measure": {**measure, "data_source": knobs["data_source"]}}
            elif measure is None:
                data = {**data, "measure": {"data_source": knobs["data_source"]}}
        return data


# The environment a trial's processes get (set before torch is imported). The worker applies it
# (workers/trial.py) and the `env` export prints it: one definition, so they cannot disagree.
NVLS_OFF_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# Knob -> the NCCL variable NCCL reads at communicator init.
NCCL_ENV_VARS = {
    "nccl_algo": "NCCL_ALGO",
    "nccl_proto": "NCCL_PROTO",
    "nccl_min_channels": "NCCL_MIN_NCHANNELS",
    "nccl_max_channels": "NCCL_MAX_NCHANNELS",
    "nccl_buffsize": "NCCL_BUFFSIZE",
}


# The `allocator` knob -> its PYTORCH_CUDA_ALLOC_CONF option (torch reads the variable when CUDA
# first allocates).
ALLOC_CONF_VAR = "PYTORCH_CUDA_ALLOC_CONF"
ALLOCATOR_SETTINGS = {"expandable": "expandable_segments:True"}


def process_env(config: TrialConfig) -> dict[str, str]:
    """Environment the trial's libraries read at import or init: config.env, the NCCL knobs, the
    allocator knob (added to any PYTORCH_CUDA_ALLOC_CONF of config.env), and for several GPUs
    the NVLink-multicast-off settings (MeasureSettings.disable_nvls_multicast)."""
    env = dict(config.env)
    for knob, var in NCCL_ENV_VARS.items():
        value = getattr(config.knobs, knob)
        if value not in (None, "default"):
            env[var] = str(value)
    if (setting := ALLOCATOR_SETTINGS.get(config.knobs.allocator)) is not None:
        given = env.get(ALLOC_CONF_VAR)
        env[ALLOC_CONF_VAR] = f"{given},{setting}" if given else setting
    if config.num_gpus > 1 and config.measure.disable_nvls_multicast:
        env.update(NVLS_OFF_ENV)
    return env


# --------------------------------------------------------------------------- result


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters at a word's end, with " ..." where it was cut
    (a reason cut mid-word reads as a different word). A text without a space in its second
    half is cut at the limit."""
    if len(text) <= limit:
        return text
    head = text[: max(limit - 4, 0)]
    space = max(head.rfind(" "), head.rfind("\n"))
    if space > len(head) // 2:
        head = head[:space]
    return head.rstrip() + " ..."


class TrialStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"


class FailureClass(StrEnum):
    # Properties of the config: told to the search as infeasible, never retried.
    OOM = "oom"
    UNSUPPORTED = "unsupported"
    COMPILE_ERROR = "compile_error"
    NUMERICS = "numerics"
    # Not properties of the config: infra failures, retried once.
    TIMEOUT = "timeout"
    CRASH = "crash"
    INFRA = "infra"
    # Not a property of the config either, and no retry fixes it: the worker cannot run any
    # config of the study (a package the model needs is missing, CUDA was asked for and is not
    # there, the driver does not match). The study stops at its first one, with the remedy.
    ENVIRONMENT = "environment"

    @property
    def is_config_failure(self) -> bool:
        return self in CONFIG_FAILURES


CONFIG_FAILURES = frozenset(
    {FailureClass.OOM, FailureClass.UNSUPPORTED, FailureClass.COMPILE_ERROR, FailureClass.NUMERICS}
)


class Fingerprint(_Record):
    """Hardware and software a result was measured on. Compare results only within one key."""

    device_type: Literal["cuda", "cpu"]
    device_name: str
    device_count: int
    compute_capability: str | None = None
    memory_total_gib: float | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str
    nccl: str | None = None
    python: str
    hostname: str
    cpu: str | None = None
    interconnect: str | None = None

    @property
    def key(self) -> str:
        """Stable short id over what makes results comparable (not the hostname)."""
        parts = [
            self.device_type,
            self.device_name,
            str(self.device_count),
            self.compute_capability or "",
            self.driver or "",
            self.cuda or "",
            self.torch,
        ]
        return hashlib.sha1("|".join(parts).encode()).hexdigest()[:12]


class TelemetrySeries(_Record):
    """The NVML samples themselves, aligned by index: seconds since the measured repeats began,
    and each metric at that moment (None: not read at that tick; an empty list: the driver
    does not report it). The dashboard's trial page draws them as time series."""

    t_s: list[float]
    sm_util_pct: list[float | None] = Field(default_factory=list)
    mem_util_pct: list[float | None] = Field(default_factory=list)
    power_w: list[float | None] = Field(default_factory=list)
    sm_clock_mhz: list[float | None] = Field(default_factory=list)
    temperature_c: list[float | None] = Field(default_factory=list)
    mem_used_gib: list[float | None] = Field(default_factory=list)

    @model_validator(mode="after")
    def _aligned(self) -> TelemetrySeries:
        for name in type(self).model_fields:
            values = getattr(self, name)
            if name != "t_s" and values and len(values) != len(self.t_s):
                raise ValueError(f"{name}: {len(values)} samples for {len(self.t_s)} times")
        return self


class Telemetry(_Record):
    """NVML samples during the measured repeats, summarised (None where NVML is absent), and
    the samples themselves where the worker kept them (`series`)."""

    samples: int = 0
    sm_util_mean_pct: float | None = None
    mem_util_mean_pct: float | None = None
    power_mean_w: float | None = None
    energy_j: float | None = None
    sm_clock_mean_mhz: float | None = None
    sm_clock_max_mhz: float | None = None  # the device's max SM clock, for comparison
    temperature_max_c: float | None = None
    throttle_reasons: list[str] = Field(default_factory=list)
    nvml_used_gib: float | None = None
    series: TelemetrySeries | None = None


class TrialResult(_Record):
    """What one trial measured, or how it failed."""

    schema_version: Literal[1] = SCHEMA_VERSION
    status: TrialStatus
    failure_class: FailureClass | None = None
    error_message: str | None = None
    # Throughput: the median repeat, with the min and max repeats as its spread. With several
    # ranks, tokens_per_s counts every rank and a repeat's time is the slowest rank's.
    tokens_per_s: float | None = None
    tokens_per_s_min: float | None = None
    tokens_per_s_max: float | None = None
    tokens_per_s_per_gpu: float | None = None
    repeat_tokens_per_s: list[float] = Field(default_factory=list)
    tokens_per_step: int | None = None  # micro_batch x seq_len x grad_accum x data-parallel ranks
    steps_per_repeat: int | None = None
    step_time_s: float | None = None
    # Model FLOPs utilisation (see flops_convention) against peak_flops per GPU.
    mfu: float | None = None
    flops_per_token: float | None = None
    flops_convention: str | None = None
    peak_flops: float | None = None
    peak_flops_source: str | None = None
    # Memory: the peak of the measured steps and the limit it was measured against (per GPU:
    # with several ranks, the largest rank's peak).
    peak_mem_gib: float | None = None
    peak_reserved_gib: float | None = None
    memory_kind: Literal["cuda", "cpu_rss"] | None = None
    memory_limit_gib: float | None = None
    required_mem_gib: float | None = None  # for an OOM: what the failing allocation asked for
    # With measure.headroom_check: the peaks over the whole trial, the evaluation pass and the
    # checkpoint save included (peak_mem_gib and peak_reserved_gib stop before them).
    peak_mem_with_eval_ckpt_gib: float | None = None
    peak_reserved_with_eval_ckpt_gib: float | None = None
    # For `unsupported`: the knob values the worker names as the cause (e.g. {"attention":
    # "cudnn", "precision": "fp32"}). The search learns a rule over exactly these and never
    # proposes a matching config again in the study; None: it falls back to the (attention,
    # precision, compile_mode) of the failing trial.
    unsupported_knobs: dict[str, Any] | None = None
    # Time outside the measurement: reported, never counted in throughput.
    first_step_s: float | None = None
    compile_s: float | None = None
    warmup_steps: int | None = None
    warmup_s: float | None = None
    build_s: float | None = None
    wall_s: float | None = None
    # Where the wall time went (workers/phases.py), seconds per phase in order: start (spawn
    # to the trial's first line), imports, setup, build, first_step (compile included),
    # warmup, measure, checks, eval and checkpoint (a headroom check's), exit (result written
    # to the process gone); a parity trial's first_step and measure are its parity steps.
    # overhead_s: wall_s less the measured repeats and compile_s: the time a cheaper trial
    # could save.
    phases_s: dict[str, float] | None = None
    # The build phase's parts (workers/trial.build_step), seconds: checks (the static support
    # rules), probe (the attention backend's kernel run once; absent when the rules refused),
    # model (built on the device, float8 conversion), optimizer (and the compile or parallel
    # wrapper), data (the batches). A cuDNN trial's probe takes 1.3-1.5 s on the H200 where
    # the same probe in a bare process takes 0.21 s and flash's 0.07 s
    # (bench/results/h200_session_20261204b).
    build_parts_s: dict[str, float] | None = None
    overhead_s: float | None = None
    # How the trial's process started: `fresh` (a new interpreter) or `forked` (a child of
    # the node's pre-imported worker, workers/preload.py).
    process_start: Literal["fresh", "forked"] | None = None
    # The per-study compile cache (TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR, workers/
    # compile_cache.py): inductor's FX-graph cache hits and misses (bypasses counted as
    # misses) over this trial's compiles. No hit: a cold compile, what a first run pays.
    compile_cache_hits: int | None = None
    compile_cache_misses: int | None = None
    # The worker stopped after the first timed repeat(s): they ran below
    # measure.abandon_below_tokens_per_s. Its numbers are real but not a full measurement:
    # never a recommendation, never re-measured.
    stopped_early: bool = False
    # Sanity: loss over the measured steps on synthetic data.
    loss_first: float | None = None
    loss_last: float | None = None
    # A loss-parity trial (MeasureSettings.parity_steps): the loss of every optimizer step,
    # in order, from the first. None for a throughput trial.
    loss_curve: list[float] | None = None
    param_count: int | None = None
    fingerprint: Fingerprint | None = None
    telemetry: Telemetry | None = None
    # The input pipeline (loader and file data; None for synthetic data). input_wait_share: the
    # share of the measured repeats' time the training loop spent blocked on the next batch
    # (the DataLoader's next() and the host-to-device copy); with several ranks, the largest.
    # gpu_idle_share: 1 - NVML's mean SM busy share over the repeats (None without NVML).
    # padding_share: the share of token positions that were padding (rows of a dataset shorter
    # than seq_len+1); tokens_per_s counts real tokens only.
    input_wait_share: float | None = Field(default=None, ge=0, le=1)
    gpu_idle_share: float | None = Field(default=None, ge=0, le=1)
    padding_share: float | None = Field(default=None, ge=0, lt=1)
    # Multi-GPU trials: how many rank processes measured, how the model was spread, and for a
    # failure the rank that failed first (whose failure classifies the trial).
    num_ranks: int | None = None
    parallel: str | None = None
    failed_rank: int | None = None
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> TrialResult:
        if self.status == TrialStatus.OK:
            if self.tokens_per_s is None or self.tokens_per_s <= 0:
                raise ValueError("an ok result needs a positive tokens_per_s")
            if self.failure_class is not None:
                raise ValueError("an ok result has no failure_class")
        elif self.failure_class is None:
            raise ValueError("a failed result needs a failure_class")
        return self

    @classmethod
    def failure(cls, failure_class: FailureClass, message: str, **extra: Any) -> TrialResult:
        return cls(
            status=TrialStatus.FAILED,
            failure_class=failure_class,
            error_message=clip(message, 4000),
            **extra,
        )

    @property
    def compile_cache(self) -> Literal["cold", "warm", "partial"] | None:
        """cold: every compiled graph missed the cache; warm: every one hit; None: nothing
        was compiled (or the counters are unknown)."""
        hits, misses = self.compile_cache_hits or 0, self.compile_cache_misses or 0
        if hits + misses == 0:
            return None
        return "cold" if hits == 0 else "warm" if misses == 0 else "partial"

    @property
    def spread_rel(self) -> float | None:
        """Half the min-max range of the repeats, relative to the median (the noise band)."""
        return spread_rel(self.tokens_per_s, self.tokens_per_s_min, self.tokens_per_s_max)


def spread_rel(median: float | None, low: float | None, high: float | None) -> float | None:
    """Half the min-max range relative to the median; None when a number is missing."""
    if not median or low is None or high is None:
        return None
    return (high - low) / 2 / median


def canonical_params(params: dict[str, Any]) -> str:
    """A stable string for a knob assignment (dedupe, landscape lookups)."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
