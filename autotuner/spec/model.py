"""The model a trial trains: `ModelSpec` (a preset, a Hugging Face config, or the user's
factory) and the sizes read from a Hugging Face config."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from pydantic import Field, model_validator

from autotuner.presets import MODEL_PRESETS
from autotuner.spec.base import _Record


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
    def attention_softcap(self) -> float | None:
        """The cap a Hugging Face model puts on its attention logits (Gemma 2's
        attn_logit_softcapping: cap * tanh(score / cap)), or None: only attention backends
        that take a score function can run such a model (autotuner/spec/support_rules.py)."""
        cap = (self.hf_config or {}).get("attn_logit_softcapping")
        return float(cap) if cap else None

    @property
    def attention_window(self) -> int | None:
        """How many tokens back a Hugging Face model's sliding-window layers attend (Gemma's
        local layers, Mistral 7B v0.1), where that is shorter than seq_len, else None: only
        attention backends that take a mask can run such a model. Qwen2's window applies
        only with use_sliding_window (transformers reads it so)."""
        cfg = self.hf_config or {}
        window = cfg.get("sliding_window")
        if not isinstance(window, int) or cfg.get("use_sliding_window") is False:
            return None
        return window if window < self.seq_len else None

    @property
    def attention_dropout(self) -> float:
        """The attention dropout a Hugging Face model's config sets (its name differs by
        model: GPT-2's attn_pdrop is 0.1 by default), which FlexAttention cannot apply."""
        cfg = self.hf_config or {}
        names = ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob")
        return float(next((cfg[n] for n in names if cfg.get(n) is not None), 0.0))

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
