"""The model builders: each structural knob value changes the module or the ops that run."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from autotuner.spec import Knobs, ModelSpec
from workers.errors import EnvironmentProblem, UnsupportedConfig
from workers.models import build_model, padded_vocab_size
from workers.models.llama import apply_rope, rope_tables

from .conftest import OpCounter


def _fwd_bwd_ops(model, vocab: int = 512, seq: int = 64) -> dict[str, int]:
    x = torch.randint(0, vocab, (2, seq))
    with OpCounter() as ops:
        model(x, x).backward()
    return ops.counts


@pytest.mark.parametrize("multiple, rows", [(1, 1025), (64, 1088), (128, 1152)])
def test_vocab_padding_pads_embedding_and_output_rows(multiple, rows):
    spec = ModelSpec.resolve({"preset": "tiny", "vocab_size": 1025})
    assert padded_vocab_size(1025, multiple) == rows
    gpt = build_model(spec, Knobs(vocab_pad_multiple=multiple, attention="math"))
    assert gpt.wte.weight.shape[0] == gpt.lm_head.weight.shape[0] == rows
    assert gpt.wte.weight is gpt.lm_head.weight  # still tied
    llama_spec = spec.model_copy(update={"family": "llama"})
    llama = build_model(llama_spec, Knobs(vocab_pad_multiple=multiple))
    assert llama.output.weight.shape[0] == rows


@pytest.mark.parametrize("preset", ["tiny", "llama-tiny"])
def test_attention_backend_selects_the_kernel(preset):
    spec = ModelSpec.resolve({"preset": preset})
    math_ops = _fwd_bwd_ops(build_model(spec, Knobs(attention="math")))
    flash_ops = _fwd_bwd_ops(build_model(spec, Knobs(attention="flash")))
    fused = "_scaled_dot_product_flash_attention_for_cpu"
    assert flash_ops[fused] == spec.n_layer and math_ops[fused] == 0
    # The math backend materialises the score matrix: batched matmuls and a softmax.
    assert math_ops["_safe_softmax"] + math_ops["_softmax"] == spec.n_layer
    assert math_ops["bmm"] > 0 and flash_ops["bmm"] == 0


@pytest.mark.parametrize("preset, act", [("tiny", "gelu"), ("llama-tiny", "silu")])
def test_checkpointing_recomputes_what_it_says(preset, act):
    spec = ModelSpec.resolve({"preset": preset})
    ops = {
        mode: _fwd_bwd_ops(build_model(spec, Knobs(attention="flash", checkpointing=mode)))
        for mode in ("none", "selective", "full")
    }
    matmuls = {m: ops[m]["mm"] + ops[m]["addmm"] for m in ops}
    attn = "_scaled_dot_product_flash_attention_for_cpu"
    L = spec.n_layer
    # none: every op once. full: the whole block again in backward (matmuls and attention too).
    assert ops["none"][act] == L and ops["full"][act] == 2 * L
    assert ops["full"][attn] == 2 * L and matmuls["full"] > matmuls["none"]
    # selective: cheap ops (activation, norms) recomputed, matmuls and attention kept.
    assert ops["selective"][act] == 2 * L
    assert ops["selective"][attn] == L and matmuls["selective"] == matmuls["none"]


def test_llama_shapes_gqa_swiglu_rmsnorm():
    spec = ModelSpec.resolve({"preset": "llama-tiny"})  # 4 heads, 2 kv heads, d 64
    model = build_model(spec, Knobs(attention="math"))
    block = model.layers[0]
    assert block.attention.wq.out_features == 4 * 16
    assert block.attention.wk.out_features == block.attention.wv.out_features == 2 * 16
    assert isinstance(block.attention_norm, torch.nn.RMSNorm)
    assert {"w1", "w2", "w3"} <= {n for n, _ in block.feed_forward.named_children()}
    assert all(lin.bias is None for lin in (block.attention.wq, block.feed_forward.w1))


def test_rope_rotates_by_position_and_keeps_norms():
    rope = rope_tables(8, 16)
    x = torch.randn(1, 2, 8, 16)
    y = apply_rope(x, rope)
    torch.testing.assert_close(y[..., 0, :], x[..., 0, :])  # position 0: no rotation
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))  # a rotation keeps lengths
    assert not torch.allclose(y[..., 1:, :], x[..., 1:, :])


HF_SPEC = {
    "hf_config": {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 500,
        "max_position_embeddings": 64,
    }
}


@pytest.mark.skipif(importlib.util.find_spec("transformers") is not None, reason="has transformers")
def test_hf_without_transformers_is_an_environment_failure_with_the_install_hint():
    with pytest.raises(EnvironmentProblem, match="pip install transformers"):
        build_model(ModelSpec.resolve(HF_SPEC), Knobs(attention="math"))


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_hf_model_routes_attention_through_attend(monkeypatch):
    import workers.models.hf as hf

    calls = []
    real = hf.attend
    monkeypatch.setattr(hf, "attend", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    model = build_model(ModelSpec.resolve(HF_SPEC), Knobs(attention="flash", vocab_pad_multiple=64))
    assert model.inner.get_input_embeddings().weight.shape[0] == 512
    x = torch.randint(0, 500, (2, 64))
    model(x, x).backward()
    assert calls == ["flash", "flash"]


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
@pytest.mark.parametrize(
    "model_type, extra, own_head",
    [
        ("llama", {}, True),
        ("gemma2", {"final_logit_softcapping": 5.0, "head_dim": 16}, True),  # soft-capped
        ("cohere", {"logit_scale": 0.25}, False),  # scaled: transformers' own output layer
    ],
)
def test_the_hf_output_region_computes_the_loss_transformers_forward_does(
    model_type, extra, own_head
):
    """HFCausalLM runs the decoder, then its own head_loss (a region compile_scope 'block'
    compiles): the loss must be the cross-entropy of transformers' own logits, soft-capping
    included; a model that scales its logits otherwise keeps transformers' forward."""
    import torch.nn.functional as F

    cfg = {**HF_SPEC["hf_config"], "model_type": model_type, **extra}
    model = build_model(ModelSpec.resolve({"hf_config": cfg}), Knobs(attention="math"))
    assert model.own_head is own_head
    x = torch.randint(0, 500, (2, 16), generator=torch.Generator().manual_seed(0))
    logits = model.inner(input_ids=x, use_cache=False).logits
    want = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), x.reshape(-1))
    torch.testing.assert_close(model(x, x), want)


GEMMA2 = {
    **HF_SPEC["hf_config"],
    "model_type": "gemma2",
    "head_dim": 16,
    "query_pre_attn_scalar": 16,
    # A cap small enough to change the logits of a random model (Gemma 2 2B's is 50).
    "attn_logit_softcapping": 0.5,
    "sliding_window": 64,
}


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
@pytest.mark.parametrize("attention", ["math", "flex"])
@pytest.mark.parametrize("window", [64, 6], ids=["capped", "capped-and-windowed"])
def test_capped_and_windowed_attention_trains_as_transformers_eager_attention_does(
    attention, window
):
    """Gemma 2 caps its attention logits (cap * tanh(score / cap)) and alternates layers that
    see the whole causal past with layers that see `sliding_window` tokens back: the attention
    hook must apply both, or the trial measures another model. The loss (and with math the
    gradients; FlexAttention has no backward on the CPU) is that of the same weights run
    through transformers' own eager attention, which builds the masks itself."""
    spec = ModelSpec.resolve({"hf_config": {**GEMMA2, "sliding_window": window}, "seq_len": 16})
    assert spec.attention_softcap == 0.5
    assert spec.attention_window == (window if window < 16 else None)
    model = build_model(spec, Knobs(attention=attention))
    for layer in model.inner.model.layers:  # logits of a trained model's size, past the cap
        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
            proj.weight.data.mul_(20)
    x = torch.randint(0, 500, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.set_grad_enabled(attention == "math"):
        loss = model(x, x)
        if attention == "math":
            loss.backward()
        ours = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        model.zero_grad()
        model.inner.set_attn_implementation("eager")
        want = model(x, x)
        if attention == "math":
            want.backward()
    torch.testing.assert_close(loss, want)
    theirs = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(ours) == len(theirs) == (len(list(model.parameters())) if attention == "math" else 0)
    for got, expected in zip(ours, theirs, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    # The cap and the window mattered: without either, the same weights give other hidden
    # states (by far more than the parity's tolerance).
    plain = {**GEMMA2, "attn_logit_softcapping": None}
    with torch.no_grad():
        capped = model.inner.model(input_ids=x).last_hidden_state
        for other in (plain, {**GEMMA2, "sliding_window": 64}) if window < 16 else (plain,):
            model_b = build_model(
                ModelSpec.resolve({"hf_config": other, "seq_len": 16}), Knobs(attention="math")
            )
            model_b.load_state_dict(model.state_dict())
            hidden = model_b.inner.model(input_ids=x).last_hidden_state
            assert (hidden - capped).abs().max() > 1e-2


GPT2_HF = {
    "model_type": "gpt2",
    "n_layer": 2,
    "n_embd": 64,
    "n_head": 4,
    "vocab_size": 500,
    "n_positions": 64,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
}


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_attention_dropout_runs_where_the_kernel_has_it_and_flex_refuses_it():
    """GPT-2 drops attention weights out (attn_pdrop, 0.1 unless set), which transformers passes
    to the attention call in training: the hook applies it (two seeds, two losses; none
    without it). FlexAttention has no dropout: refused at build blaming the knob, as the
    rules refuse it before any trial."""
    x = torch.randint(0, 500, (2, 16), generator=torch.Generator().manual_seed(0))

    def losses(config: dict) -> list[float]:
        spec = ModelSpec.resolve({"hf_config": config, "seq_len": 16})
        torch.manual_seed(0)
        model = build_model(spec, Knobs(attention="math"))
        model.train()
        out = []
        for seed in (1, 2):
            torch.manual_seed(seed)
            with torch.no_grad():
                out.append(model(x, x).item())
        return out

    dropped = losses({**GPT2_HF, "attn_pdrop": 0.5})
    assert dropped[0] != dropped[1]
    kept = losses({**GPT2_HF, "attn_pdrop": 0.0})
    assert kept[0] == kept[1]
    spec = ModelSpec.resolve({"hf_config": {**GPT2_HF, "attn_pdrop": 0.5}, "seq_len": 16})
    assert spec.attention_dropout == 0.5
    with pytest.raises(UnsupportedConfig, match="flex drops nothing out") as refused:
        build_model(spec, Knobs(attention="flex"))
    assert refused.value.knobs == {"attention": "flex"}


GPT_OSS = {
    "model_type": "gpt_oss",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 64,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 500,
    "sliding_window": 8,
    "max_position_embeddings": 64,
}


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_an_attention_the_hook_cannot_apply_is_refused_naming_what_whatever_the_knobs():
    """gpt-oss adds learned sink logits to every attention's softmax (`s_aux`), which `attend`
    does not apply: its trials would measure another model, so the model is refused at
    build, no knob blamed (the study stops at its first trial)."""
    spec = ModelSpec.resolve({"hf_config": GPT_OSS, "seq_len": 16})
    with pytest.raises(UnsupportedConfig, match="learned attention sinks") as refused:
        build_model(spec, Knobs(attention="math"))
    assert refused.value.knobs == {}


@pytest.mark.parametrize(
    "preset, dropout, replays",
    [("llama-tiny", 0.0, False), ("tiny", 0.0, False), ("tiny", 0.2, True)],
)
def test_a_checkpointed_block_replays_the_rng_only_where_it_draws_from_it(
    monkeypatch, preset, dropout, replays
):
    """Preserving the RNG state for a recompute with nothing random in it buys nothing, and on
    CUDA it keeps every checkpointed graph out of inductor's FX-graph cache (seen on the H200:
    Llama 8B's checkpointed trials all compiled cold). A block with dropout must replay it."""
    import workers.models.checkpointing as ckpt

    calls: list[bool] = []
    real = ckpt.checkpoint

    def observed(*args, **kwargs):  # the real checkpoint, its preserve_rng_state recorded
        calls.append(kwargs["preserve_rng_state"])
        return real(*args, **kwargs)

    monkeypatch.setattr(ckpt, "checkpoint", observed)
    spec = ModelSpec.resolve({"preset": preset, "dropout": dropout})
    _fwd_bwd_ops(build_model(spec, Knobs(attention="math", checkpointing="full")))
    assert calls == [replays] * spec.n_layer


def test_a_dropout_models_recompute_replays_its_masks():
    """With dropout, the checkpointed model's gradients are the plain model's, seed for seed:
    the recompute drew the forward's masks again."""
    spec = ModelSpec.resolve({"preset": "tiny", "dropout": 0.2})
    x = torch.randint(0, spec.vocab_size, (2, 32))
    grads = {}
    for mode in ("none", "full"):
        torch.manual_seed(0)
        model = build_model(spec, Knobs(attention="math", checkpointing=mode))
        model.train()
        torch.manual_seed(1)
        model(x, x).backward()
        grads[mode] = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert torch.allclose(grads["none"], grads["full"], atol=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_hf_checkpointing_recomputes_the_decoder_layers_as_the_built_in_blocks():
    spec = ModelSpec.resolve(HF_SPEC)
    ops = {
        mode: _fwd_bwd_ops(build_model(spec, Knobs(attention="flash", checkpointing=mode)), 500)
        for mode in ("none", "selective", "full")
    }
    attn = "_scaled_dot_product_flash_attention_for_cpu"
    L = spec.n_layer
    matmuls = {m: ops[m]["mm"] + ops[m]["addmm"] + ops[m]["bmm"] for m in ops}
    assert ops["none"]["silu"] == L and ops["full"]["silu"] == 2 * L
    assert ops["full"][attn] == 2 * L and matmuls["full"] > matmuls["none"]
    assert ops["selective"]["silu"] == 2 * L
    assert ops["selective"][attn] == L and matmuls["selective"] == matmuls["none"]


def test_fused_kernels_are_refused_for_a_factory_model_naming_the_knob():
    spec = ModelSpec.resolve({"factory": "examples/my_model.py:build", **_FACTORY_SIZES})
    with pytest.raises(UnsupportedConfig, match="kernels 'none'") as refused:
        build_model(spec, Knobs(attention="math", kernels="fused-ce"))
    assert refused.value.knobs == {"kernels": "fused-ce"}


_FACTORY_SIZES = {"n_layer": 2, "d_model": 64, "n_head": 4, "vocab_size": 256, "seq_len": 32}


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_cce_is_refused_for_an_output_layer_with_a_bias_before_any_kernel_is_needed():
    """cut-cross-entropy takes the classifier's weight only: a Hugging Face model whose output
    layer has a bias (Phi's lm_head) is refused naming the knob; fused-ce (Liger takes a bias)
    and a bias-free output layer build. Refused on the CPU before cut_cross_entropy (Triton)
    is imported, so this runs here."""
    phi = {
        "hf_config": {
            "model_type": "phi",
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "intermediate_size": 128,
            "vocab_size": 512,
            "max_position_embeddings": 64,
        },
        "seq_len": 32,
    }
    with pytest.raises(UnsupportedConfig, match="has a bias") as refused:
        build_model(ModelSpec.resolve(phi), Knobs(attention="math", kernels="cce"))
    assert refused.value.knobs == {"kernels": "cce"}
    assert build_model(ModelSpec.resolve(phi), Knobs(attention="math", kernels="fused-ce"))
    assert build_model(ModelSpec.resolve(HF_SPEC), Knobs(attention="math", kernels="cce"))


def test_selective_checkpointing_keeps_flex_attentions_output_as_it_keeps_sdpas():
    """FlexAttention is a higher-order op, not an aten op: the selective policy must name it,
    or a selective block re-runs flex's forward in backward (full checkpointing's trade for
    the attention). The policy asked as a block's forward asks it (FlexAttention has no
    backward on the CPU, so no block runs it here under grad)."""
    from torch.utils.checkpoint import CheckpointPolicy

    from workers.models.checkpointing import _policy

    keep = CheckpointPolicy.MUST_SAVE
    assert _policy(None, torch._higher_order_ops.flex_attention) == keep
    assert _policy(None, torch.ops.aten._scaled_dot_product_flash_attention.default) == keep
    assert _policy(None, torch.ops.aten.mm.default) == keep
    assert _policy(None, torch.ops.aten.silu.default) == CheckpointPolicy.PREFER_RECOMPUTE


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_a_windowed_layer_counts_its_window_in_the_flops_mfu_is_computed_from():
    """FLOPs per token count each query's keys (the non-causal convention): T for a global
    layer, the window for a layer that sees fewer. Gemma 2 at a 6-token window over 16
    tokens: its first layer slides, its second sees all 16, so 12 x (4 heads x 16) x (16 - 6)
    FLOPs less a token than the same model with a window longer than the sequence."""
    from autotuner.spec import TrialConfig, TrialStatus
    from workers.trial import run_trial

    from .conftest import CPU_KNOBS, FAST

    def flops(window: int) -> float:
        spec = ModelSpec.resolve({"hf_config": {**GEMMA2, "sliding_window": window}, "seq_len": 16})
        knobs = Knobs(**{**CPU_KNOBS, "attention": "math", "micro_batch_size": 2})
        result = run_trial(TrialConfig(model=spec, knobs=knobs, measure=FAST))
        assert result.status == TrialStatus.OK, result.error_message
        return result.flops_per_token

    assert flops(64) - flops(6) == pytest.approx(12 * 64 * (16 - 6))
