"""Every knob on a Hugging Face model, on a real GPU: each test shows the knob changed what ran
(the kernels the profiler saw, the memory the allocator held, the modules that were swapped),
not only that the trial passed.

python -m pytest tests/gpu/test_hf_knobs_gpu.py -m gpu -q -s
"""

from __future__ import annotations

import pytest

from autotuner.spec import (
    FailureClass,
    Knobs,
    MeasureSettings,
    ModelSpec,
    TrialConfig,
    TrialStatus,
)
from workers.launch import run_trial_process

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

# Llama-3.2's layer shapes (head_dim 64, grouped-query 4:1) and its 128k vocabulary, 4 layers:
# the real kernels in seconds, with logits as large as the real model's.
HF_LLAMA = {
    "hf_config": {
        "model_type": "llama",
        "num_hidden_layers": 4,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 2048,
        "rope_theta": 500000.0,
        "tie_word_embeddings": True,
    },
    "seq_len": 2048,
}
MEASURE = MeasureSettings(repeats=3, min_repeat_s=0.2, warmup_min_steps=3, warmup_max_steps=10)


def _model(**knobs):
    from workers.models import build_model

    spec = ModelSpec.resolve(HF_LLAMA)
    with torch.device("cuda"):
        model = build_model(spec, Knobs(**{"attention": "flash", **knobs}))
    return spec, model


def _step(model, spec, micro_batch: int = 2) -> torch.Tensor:
    x = torch.randint(0, spec.vocab_size, (micro_batch, spec.seq_len), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, x)
    loss.backward()
    return loss.detach()


def _kernel_names(model, spec) -> set[str]:
    from torch.profiler import ProfilerActivity, profile

    _step(model, spec)  # the first call builds and autotunes; profile the second
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        _step(model, spec)
        torch.cuda.synchronize()
    return {e.key.lower() for e in prof.key_averages()}


def _peak_gib(model, spec, micro_batch: int = 2) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    _step(model, spec, micro_batch)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**30


# Substrings of each SDPA backend's CUDA kernels. cuDNN's own kernel names may say "flash"
# (its fused flash-attention engine), so a backend's marks are looked for apart from cuDNN's.
ATTENTION_KERNELS = {"flash": "flash", "efficient": "fmha", "cudnn": "cudnn"}


@pytest.mark.parametrize("backend", list(ATTENTION_KERNELS))
def test_the_attention_knob_picks_the_kernel_that_runs(backend):
    spec, model = _model(attention=backend)
    names = _kernel_names(model, spec)
    print(
        backend,
        sorted(n for n in names if any(s in n for s in ("attn", "fmha", "flash", "sdpa", "cudnn"))),
    )
    mine = ATTENTION_KERNELS[backend]
    assert any(mine in n for n in names), sorted(names)
    outside_cudnn = [n for n in names if "cudnn" not in n]
    for other, mark in ATTENTION_KERNELS.items():
        if other != backend:
            pool = names if other == "cudnn" else outside_cudnn
            assert not any(mark in n for n in pool), (other, sorted(pool))


def test_checkpointing_keeps_less_the_more_it_recomputes():
    peaks = {}
    for mode in ("none", "selective", "full"):
        spec, model = _model(checkpointing=mode)
        peaks[mode] = _peak_gib(model, spec)
        del model
        torch.cuda.empty_cache()
    print("peak GiB by checkpointing:", peaks)
    assert peaks["full"] < peaks["selective"] < peaks["none"], peaks


def test_fp8_converts_every_linear_but_the_output_layer():
    from workers import precision

    spec, model = _model()
    n = precision.convert_fp8(model, Knobs(precision="fp8-tensorwise").precision)
    linears = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    float8 = [name for name, m in model.named_modules() if type(m).__name__ == "Float8Linear"]
    assert n == len(float8) == 4 * 7  # q, k, v, o, gate, up, down in each of 4 layers
    assert "inner.lm_head" not in float8 and "inner.lm_head" in linears
    assert torch.isfinite(_step(model, spec))


def test_fused_ce_frees_the_logits_and_keeps_the_loss():
    spec = ModelSpec.resolve(HF_LLAMA)
    x = torch.randint(0, spec.vocab_size, (2, spec.seq_len), device="cuda")
    peaks, losses = {}, {}
    for kernels in ("none", "fused-ce"):
        torch.manual_seed(0)
        spec, model = _model(kernels=kernels)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            losses[kernels] = model(x, x).item()
        peaks[kernels] = _peak_gib(model, spec, micro_batch=4)
        del model
        torch.cuda.empty_cache()
    # The logits of 4 x 2048 tokens over 128,256 rows: bf16, their fp32 copy and its gradient.
    logits_gib = 4 * 2048 * 128256 * (2 + 4 + 4) / 2**30
    print(f"peak GiB {peaks}, logits {logits_gib:.2f} GiB, losses {losses}")
    assert peaks["none"] - peaks["fused-ce"] > 0.5 * logits_gib, peaks
    assert losses["fused-ce"] == pytest.approx(losses["none"], rel=2e-3)


def test_cce_frees_the_logits_and_keeps_the_loss_and_its_gradient():
    """cut-cross-entropy against the unfused loss from the same weights and tokens: the loss
    within 2e-3 (as fused-ce's), the output layer's gradient pointing the same way (its filter
    skips only the blocks below bf16's resolution), and the logits' memory gone."""
    spec = ModelSpec.resolve(HF_LLAMA)
    x = torch.randint(0, spec.vocab_size, (2, spec.seq_len), device="cuda")
    peaks, losses, grads = {}, {}, {}
    for kernels in ("none", "cce"):
        torch.manual_seed(0)
        spec, model = _model(kernels=kernels)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, x)
        loss.backward()
        losses[kernels] = loss.item()
        grads[kernels] = model.inner.get_output_embeddings().weight.grad.float().clone()
        model.zero_grad(set_to_none=True)
        peaks[kernels] = _peak_gib(model, spec, micro_batch=4)
        del model
        torch.cuda.empty_cache()
    logits_gib = 4 * 2048 * 128256 * (2 + 4 + 4) / 2**30
    cos = torch.nn.functional.cosine_similarity(
        grads["cce"].flatten(), grads["none"].flatten(), dim=0
    ).item()
    print(f"peak GiB {peaks}, logits {logits_gib:.2f} GiB, losses {losses}, grad cosine {cos:.5f}")
    assert peaks["none"] - peaks["cce"] > 0.5 * logits_gib, peaks
    assert losses["cce"] == pytest.approx(losses["none"], rel=2e-3)
    assert cos > 0.99, cos


def test_cce_under_a_whole_model_compile_runs_or_is_refused_as_the_pair():
    """The question CCE's whole-model compile answers: it either runs (dynamo traced it, with
    whatever graph breaks the notes list) or fails inside cut_cross_entropy's code and is
    refused naming exactly (kernels cce, compile_scope model), as Liger's is, so the search
    learns the pair. A plain compile error here would be blamed on no knob: a test failure."""
    config = _trial(kernels="cce", compile_mode="default", compile_scope="model").model_copy(
        update={"study_id": "hf-cce-model"}
    )
    r = run_trial_process(config, timeout_s=600)
    breaks = [n for n in r.notes if "graph break" in n]
    print(
        f"cce + whole-model compile: {r.status.value} {r.failure_class} "
        f"{(r.error_message or '')[:300]} tok/s {r.tokens_per_s} compile s {r.compile_s} {breaks}"
    )
    if r.status == TrialStatus.OK:
        assert r.loss_last < r.loss_first
    else:
        assert r.failure_class == FailureClass.UNSUPPORTED, r.error_message
        assert r.unsupported_knobs == {"kernels": "cce", "compile_scope": "model"}


def test_liger_swaps_the_norms_mlp_and_rope_for_its_kernels():
    # Liger patches transformers' Llama module for the process: this test runs after the
    # in-process tests of the plain model (the trials below are processes of their own).
    spec, model = _model(kernels="liger")
    kinds = {type(m).__name__ for m in model.modules()}
    assert {"LigerRMSNorm", "LigerSwiGLUMLP"} <= kinds, kinds
    names = _kernel_names(model, spec)
    for part in ("rms_norm", "swiglu", "rope"):
        assert any(part in n for n in names), (part, sorted(names))


def _trial(**knobs) -> TrialConfig:
    return TrialConfig(
        model=ModelSpec.resolve(HF_LLAMA),
        knobs=Knobs(micro_batch_size=2, **{"attention": "flash", **knobs}),
        measure=MEASURE,
    )


def test_block_scope_compiles_faster_than_the_whole_model_and_runs():
    results = {}
    for scope in ("model", "block"):
        config = _trial(compile_mode="default", compile_scope=scope).model_copy(
            update={"study_id": f"hf-scope-{scope}"}  # each its own cold compile cache
        )
        r = run_trial_process(config, timeout_s=600)
        assert r.status == TrialStatus.OK, f"{scope}: {r.failure_class}: {r.error_message}"
        results[scope] = r
    block, whole = results["block"], results["model"]
    assert block.compiled_regions == "4 LlamaDecoderLayer blocks and the output layer with its loss"
    assert whole.compiled_regions is None
    print(
        f"compile s: model {whole.compile_s:.1f}, block {block.compile_s:.1f}; tokens/s: model "
        f"{whole.tokens_per_s:,.0f}, block {block.tokens_per_s:,.0f}"
    )
    assert block.compile_s < whole.compile_s


@pytest.mark.parametrize(
    "knobs",
    [
        {"kernels": "liger", "compile_mode": "default", "compile_scope": "block"},
        {
            "kernels": "fused-ce",
            "precision": "fp8-tensorwise",
            "compile_mode": "default",
            "compile_scope": "block",
        },
        {
            "kernels": "cce",
            "precision": "fp8-tensorwise",
            "compile_mode": "default",
            "compile_scope": "block",
        },
        {"kernels": "liger", "checkpointing": "selective"},
        {"optimizer": "adamw-8bit", "allocator": "expandable", "vocab_pad_multiple": 128},
    ],
    ids=[
        "liger-compiled-blocks",
        "fused-ce-fp8-compiled-blocks",
        "cce-fp8-compiled-blocks",
        "liger-selective",
        "8bit-expandable",
    ],
)
def test_knob_combinations_measure_on_a_hugging_face_model(knobs):
    r = run_trial_process(_trial(**knobs), timeout_s=600)
    assert r.status == TrialStatus.OK, f"{knobs}: {r.failure_class}: {r.error_message}"
    assert r.loss_last < r.loss_first
    print(knobs, f"{r.tokens_per_s:,.0f} tok/s, peak {r.peak_mem_gib:.1f} GiB", r.notes)


# Gemma 2's attention (8 heads of 256, grouped 2:1, logits capped at 50, a 4096-token window
# wider than the sequence), 2 layers and a small vocabulary: the cap's kernels in seconds.
HF_GEMMA2 = {
    "hf_config": {
        "model_type": "gemma2",
        "num_hidden_layers": 2,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "query_pre_attn_scalar": 256,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
        "sliding_window": 4096,
        "vocab_size": 32000,
        "max_position_embeddings": 8192,
    },
    "seq_len": 2048,
}


@pytest.mark.parametrize("window", [4096, 512], ids=["capped", "capped-and-windowed"])
def test_flex_caps_gemma2s_attention_logits_in_its_fused_kernel_as_eager_attention_does(window):
    """Gemma 2 caps its attention logits (and Gemma 3's local layers see 512 tokens back):
    flex applies the cap as a score function and the window as a block mask inside
    FlexAttention's fused Triton kernel (no scores materialised), and its loss is that of
    transformers' eager attention on the same weights (bf16 tolerance)."""
    from workers.models import build_model

    config = {**HF_GEMMA2["hf_config"], "sliding_window": window}
    spec = ModelSpec.resolve({**HF_GEMMA2, "hf_config": config})
    with torch.device("cuda"):
        model = build_model(spec, Knobs(attention="flex"))
    names = _kernel_names(model, spec)
    print("flex", sorted(n for n in names if "flex" in n or "triton" in n)[:8])
    assert any("flex" in n or "triton_tem" in n for n in names), sorted(names)
    assert not any("flash" in n or "fmha" in n or "cudnn" in n for n in names)
    x = torch.randint(0, spec.vocab_size, (2, spec.seq_len), device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        ours = model(x, x).float()
        model.inner.set_attn_implementation("eager")
        theirs = model(x, x).float()
    print(f"loss flex {ours.item():.5f}, eager {theirs.item():.5f}")
    torch.testing.assert_close(ours, theirs, rtol=2e-2, atol=2e-2)


def test_gemma2_trials_run_flex_compiled_and_refuse_flash_naming_the_cap():
    model = ModelSpec.resolve(HF_GEMMA2)
    flex = TrialConfig(
        model=model,
        knobs=Knobs(
            micro_batch_size=2, attention="flex", compile_mode="default", compile_scope="block"
        ),
        measure=MEASURE,
    )
    r = run_trial_process(flex, timeout_s=600)
    assert r.status == TrialStatus.OK, f"{r.failure_class}: {r.error_message}"
    assert r.loss_last < r.loss_first
    print(f"flex compiled blocks: {r.tokens_per_s:,.0f} tok/s, peak {r.peak_mem_gib:.1f} GiB")
    flash = flex.model_copy(update={"knobs": flex.knobs.model_copy(update={"attention": "flash"})})
    r = run_trial_process(flash, timeout_s=300)
    assert r.failure_class == FailureClass.UNSUPPORTED, (r.failure_class, r.error_message)
    assert "attn_logit_softcapping 50" in (r.error_message or "")
    assert r.unsupported_knobs == {"attention": "flash"}
