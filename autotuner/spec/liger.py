"""What Liger-Kernel covers, as the control plane needs to know it before any trial runs.

The control plane never imports `liger_kernel` (it is in the `worker` extra, and its import
pulls in torch and Triton), so the Hugging Face architectures that `kernels=liger` can patch are
a static table here, read from the wheel named by LIGER_VERSION:
`liger_kernel.transformers.monkey_patch.MODEL_TYPE_TO_APPLY_LIGER_FN`'s keys. A newer Liger
patches more: read the table again from its wheel when the worker's pin moves
(`pip download --no-deps liger-kernel==X`, unzip, the dict's keys).
"""

from __future__ import annotations

from autotuner.spec.model import ModelFamily, ModelSpec

LIGER_VERSION = "0.8.5"

# `model_type` values of a Hugging Face config that Liger 0.8.5 patches (its norm, MLP and RoPE
# kernels and its fused linear cross-entropy in the model's forward).
HF_MODEL_TYPES: frozenset[str] = frozenset(
    {
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v4",
        "exaone4",
        "falcon_h1",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "gemma4",
        "gemma4_text",
        "glm4",
        "glm4v",
        "glm4v_moe",
        "gpt_oss",
        "granite",
        "hunyuan_v1_dense",
        "hunyuan_v1_moe",
        "internvl",
        "llama",
        "llama4",
        "llama4_text",
        "llava",
        "ministral",
        "mistral",
        "mixtral",
        "mllama",
        "mllama_text_model",
        "muse_glimmer",
        "nemotron",
        "olmo2",
        "olmo3",
        "paligemma",
        "phi3",
        "pixtral",
        "qwen2",
        "qwen2_5_vl",
        "qwen2_5_vl_text",
        "qwen2_vl",
        "qwen2_vl_text",
        "qwen3",
        "qwen3_5",
        "qwen3_5_moe",
        "qwen3_5_moe_text",
        "qwen3_5_text",
        "qwen3_moe",
        "qwen3_next",
        "qwen3_vl",
        "qwen3_vl_moe",
        "qwen3_vl_moe_text",
        "qwen3_vl_text",
        "smollm3",
        "smolvlm",
    }
)


def hf_model_type(model: ModelSpec) -> str | None:
    """The `model_type` of a Hugging Face model's config (None for the built-in families)."""
    if model.family != ModelFamily.HF or not model.hf_config:
        return None
    value = model.hf_config.get("model_type")
    return str(value) if value is not None else None


def patches(model: ModelSpec) -> bool:
    """Whether `kernels=liger` has kernels for this model's norms, MLP and RoPE: the built-in
    families always (llama: RMSNorm, SwiGLU, RoPE; gpt2: LayerNorm), a Hugging Face model when
    Liger patches its architecture, a user's factory model never (its modules are its own)."""
    if model.family == ModelFamily.HF:
        return hf_model_type(model) in HF_MODEL_TYPES
    return model.family in (ModelFamily.LLAMA, ModelFamily.GPT2)


def covered_types() -> str:
    """The covered Hugging Face model types, for a remedy's text."""
    return ", ".join(sorted(HF_MODEL_TYPES))
