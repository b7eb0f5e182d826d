"""What the control side counts for a Hugging Face model against the model transformers builds.

Every example in examples/hf/ (the real config.json of a public model) is built in full on the
`meta` device (shapes only, no memory, ~0.1 s each) and its parameters counted. The control
side never imports transformers: it counts from the spec's shapes (autotuner/flops.py for N and
MFU, the memory model for what a GPU must hold). They must agree within TOLERANCE, the total
(memory) and the active parameters a token is multiplied by (FLOPs); a mixture of experts
differs in the two. What the spec reader does not model (Gemma 2's two extra norms a layer,
Qwen3's q/k norms, Qwen2-MoE's shared-expert gate) is well inside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from autotuner.flops import active_param_count, flops_per_token, param_count  # noqa: E402
from autotuner.inputs import load_model_spec  # noqa: E402
from autotuner.search.costmodel.memory import total_params  # noqa: E402
from autotuner.spec import Knobs, ModelSpec  # noqa: E402
from autotuner.spec.model import _UNTIED_BY_DEFAULT  # noqa: E402

TOLERANCE = 0.02  # relative; the examples agree to 0.005% at worst
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hf"
SPEC_FILES = sorted(EXAMPLES.glob("*.yaml"))

# Small configs of the mixture-of-experts layouts the examples do not cover, each under the
# names its model type uses: a shared expert and dense layers (Qwen2-MoE's decoder_sparse_step
# and mlp_only_layers), experts as wide as intermediate_size (OLMoE, Mixtral's
# num_local_experts).
SMALL_MOE = {
    "qwen2_moe": {
        "model_type": "qwen2_moe",
        "hidden_size": 64,
        "intermediate_size": 160,
        "moe_intermediate_size": 48,
        "shared_expert_intermediate_size": 96,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [3],
        "num_hidden_layers": 6,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 512,
        "tie_word_embeddings": False,
    },
    "olmoe": {
        "model_type": "olmoe",
        "hidden_size": 64,
        "intermediate_size": 32,
        "num_experts": 16,
        "num_experts_per_tok": 4,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 512,
    },
    "mixtral": {
        "model_type": "mixtral",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 512,
    },
}


def build_on_meta(hf_config: dict[str, Any]) -> Any:
    """The full model transformers builds from a config.json, as workers/models/hf.py does
    (AutoConfig.for_model, then from_config), on the meta device: shapes without storage."""
    cfg = dict(hf_config)
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config)


def counted(model: Any) -> tuple[int, int]:
    """(all parameters, those one token runs through) of a built model. Routed experts are
    the parameters under `mlp.experts.` (one (n_experts, ...) tensor per projection in
    transformers 5, one Linear per expert before): a token uses top_k of n_experts of them."""
    config = model.config
    n_experts = getattr(config, "num_experts", None) or getattr(config, "num_local_experts", 0)
    top_k = getattr(config, "num_experts_per_tok", n_experts)
    total = idle = 0
    for name, p in model.named_parameters():
        total += p.numel()
        if n_experts and ".mlp.experts." in name:
            idle += p.numel() * (n_experts - top_k) // n_experts
    return total, total - idle


def assert_close(what: str, ours: float, theirs: float) -> None:
    assert abs(ours - theirs) <= TOLERANCE * theirs, (
        f"{what}: the control side counts {ours:,.0f}, transformers builds {theirs:,.0f} "
        f"({(ours - theirs) / theirs:+.2%}, tolerance {TOLERANCE:.0%})"
    )


def check_counts(spec: ModelSpec) -> None:
    assert spec.hf_config is not None
    model = build_on_meta(spec.hf_config)
    config = model.config
    # The attention's head width: what the flash rule, the worker's kernel probe and the
    # attention term of the FLOPs read (Gemma 2: 256, not 2304 / 8).
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    assert spec.head_dim == head_dim
    total, active = counted(model)
    assert_close("parameters (flops.param_count)", param_count(spec), total)
    assert_close("parameters (memory model)", total_params(spec, Knobs()), total)
    assert_close("active parameters", active_param_count(spec), active)
    # MFU's N, read back out of the FLOPs per token (6N + 12 L d T, d the attention width).
    attention = 12.0 * spec.n_layer * spec.q_dim * spec.seq_len
    assert_close("N in the FLOPs per token", (flops_per_token(spec) - attention) / 6, active)


def test_the_matrix_has_the_models_it_promises() -> None:
    names = {path.stem for path in SPEC_FILES}
    assert len(names) >= 8, names
    for name in names:
        assert (EXAMPLES / f"{name}.config.json").is_file()
    assert any(load_model_spec(path).is_moe for path in SPEC_FILES)


@pytest.mark.parametrize("spec_file", SPEC_FILES, ids=[p.stem for p in SPEC_FILES])
def test_example_counts_agree_with_transformers(spec_file: Path) -> None:
    spec = load_model_spec(spec_file)
    config = json.loads((EXAMPLES / f"{spec_file.stem}.config.json").read_text())
    assert spec.hf_config == config  # the file, inlined as it is
    # A training length, not the config's max_position_embeddings (131072 for Llama 3.2).
    assert spec.seq_len <= 8192
    check_counts(spec)


@pytest.mark.parametrize("model_type", sorted(SMALL_MOE))
def test_moe_layouts_count_like_transformers(model_type: str) -> None:
    spec = ModelSpec.resolve({"hf_config": SMALL_MOE[model_type], "seq_len": 64})
    assert spec.is_moe
    check_counts(spec)


def test_untied_defaults_are_transformers_own() -> None:
    """A config.json without tie_word_embeddings gets its class's default: the list the
    control side keeps of the untied ones must say what transformers does."""
    for model_type in sorted(_UNTIED_BY_DEFAULT):
        assert transformers.AutoConfig.for_model(model_type).tie_word_embeddings is False
    gemma2 = transformers.AutoConfig.for_model("gemma2")
    assert gemma2.tie_word_embeddings is True and "gemma2" not in _UNTIED_BY_DEFAULT
