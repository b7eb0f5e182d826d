"""The data plane on a real GPU: named configs, each in a fresh process (run on the lent H200).

python -m pytest tests/gpu/test_worker_gpu.py -m gpu -q
"""

from __future__ import annotations

import pytest

from autotuner.spec import FailureClass, Knobs, MeasureSettings, ModelSpec, TrialConfig, TrialStatus
from workers.launch import run_trial_process

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

MEASURE = MeasureSettings(repeats=3, min_repeat_s=0.2, warmup_min_steps=3, warmup_max_steps=10)
# GPT-2 124M's shapes with 2 layers: the real kernels, seconds per trial.
GPT2_2L = {"preset": "gpt2-124m", "n_layer": 2}

NAMED = {
    "gpt2-2l bf16 flash eager": (GPT2_2L, {"precision": "bf16", "attention": "flash"}),
    "gpt2-2l fp16 cudnn eager": (GPT2_2L, {"precision": "fp16", "attention": "cudnn"}),
    "llama-tiny bf16 efficient ckpt-selective": (
        {"preset": "llama-tiny"},
        {"precision": "bf16", "attention": "efficient", "checkpointing": "selective"},
    ),
    "gpt2-2l tf32 math foreach": (
        GPT2_2L,
        {"precision": "tf32", "attention": "math", "optimizer": "adamw-foreach"},
    ),
}


def _config(model, knobs, **measure) -> TrialConfig:
    return TrialConfig(
        model=ModelSpec.resolve(model),
        knobs=Knobs(micro_batch_size=8, vocab_pad_multiple=64, **knobs),
        measure=MEASURE.model_copy(update=measure),
    )


@pytest.mark.parametrize("name", list(NAMED))
def test_named_config_measures(name):
    model, knobs = NAMED[name]
    r = run_trial_process(_config(model, knobs), timeout_s=300)
    assert r.status == TrialStatus.OK, f"{name}: {r.failure_class}: {r.error_message}"
    assert r.memory_kind == "cuda" and r.peak_mem_gib > 0 and r.peak_reserved_gib >= r.peak_mem_gib
    assert r.fingerprint.device_type == "cuda" and r.fingerprint.compute_capability
    assert r.mfu is not None and 0 < r.mfu < 0.6, f"{name}: implausible MFU {r.mfu}"
    assert r.telemetry is not None and r.telemetry.samples > 0
    assert r.loss_last < r.loss_first


def test_flash_in_fp32_is_unsupported_before_building():
    r = run_trial_process(_config(GPT2_2L, {"precision": "fp32", "attention": "flash"}))
    assert r.failure_class == FailureClass.UNSUPPORTED
    assert r.unsupported_knobs == {"attention": "flash", "precision": "fp32"}


def test_memory_cap_provokes_a_real_cuda_oom():
    config = _config(GPT2_2L, {"precision": "bf16", "attention": "math"}, memory_limit_gib=1.0)
    config.knobs.micro_batch_size = 64
    r = run_trial_process(config, timeout_s=300)
    assert r.failure_class == FailureClass.OOM, r.error_message
    assert r.memory_limit_gib == 1.0 and r.required_mem_gib is not None


def test_fp8_tensorwise_runs_or_is_refused_by_capability():
    r = run_trial_process(
        _config(GPT2_2L, {"precision": "fp8-tensorwise", "attention": "flash"}), timeout_s=300
    )
    if torch.cuda.get_device_capability() < (8, 9):
        assert r.failure_class == FailureClass.UNSUPPORTED
    else:
        assert r.status == TrialStatus.OK, r.error_message
        assert any("float8" in n for n in r.notes)


def test_the_expandable_allocator_takes_effect_and_strands_less_than_the_default():
    """The `allocator` knob on the GPU: a trial with expandable segments runs with them (its
    note reads the allocator's own settings: a forked trial sets the variable after torch's
    import), allocates what the default allocator allocates, and reserves less over it. GPT-2
    124M eager at micro-batch 32 reserved 1.28x its allocated peak on the H200 landscape
    (30.4 GiB allocated, 38.8 reserved); the memory model's prior for expandable is 1.02."""
    peaks = {}
    for allocator in ("default", "expandable"):
        config = _config(
            {"preset": "gpt2-124m"}, {"precision": "bf16", "attention": "flash"}
        ).model_copy(deep=True)
        config.knobs = config.knobs.model_copy(
            update={"micro_batch_size": 32, "allocator": allocator}
        )
        r = run_trial_process(config, timeout_s=300)
        assert r.status == TrialStatus.OK, f"{allocator}: {r.failure_class}: {r.error_message}"
        peaks[allocator] = (r.peak_mem_gib, r.peak_reserved_gib)
        notes = [n for n in r.notes if n.startswith("CUDA allocator:")]
        if allocator == "expandable":
            assert notes and "expandable_segments:True" in notes[0], r.notes
        else:
            assert not notes
    (alloc_d, res_d), (alloc_e, res_e) = peaks["default"], peaks["expandable"]
    assert alloc_e == pytest.approx(alloc_d, rel=0.05), peaks
    assert res_e / alloc_e < res_d / alloc_d, peaks
    print(f"reserved/allocated: default {res_d / alloc_d:.3f}, expandable {res_e / alloc_e:.3f}")


def test_8bit_adamw_runs_and_frees_what_the_memory_model_says():
    """torchao's AdamW8bit on the GPU: the trial runs and trains, and its peak is below fused
    AdamW's by about what the memory model predicts (6 B/param of state freed, less one
    matrix's dequantised moments in the step): the model's 8-bit terms were measured on the
    CPU only (tests/search/test_costmodel.py)."""
    from autotuner.search.costmodel import estimate

    pytest.importorskip("torchao.optim")
    peaks, predicted = {}, {}
    for optimizer in ("adamw-fused", "adamw-8bit"):
        config = _config(
            GPT2_2L, {"precision": "bf16", "attention": "flash", "optimizer": optimizer}
        )
        r = run_trial_process(config, timeout_s=300)
        assert r.status == TrialStatus.OK, f"{optimizer}: {r.failure_class}: {r.error_message}"
        assert r.loss_last < r.loss_first
        peaks[optimizer] = r.peak_mem_gib
        predicted[optimizer] = estimate(config.model, config.knobs).allocated_gib
    freed = peaks["adamw-fused"] - peaks["adamw-8bit"]
    expected = predicted["adamw-fused"] - predicted["adamw-8bit"]
    assert freed > 0 and freed == pytest.approx(expected, rel=0.35), (peaks, predicted)


def test_a_checkpointed_compiled_config_rerun_hits_the_studys_compile_cache(tmp_path, monkeypatch):
    """Two trials of one compiled config with full checkpointing, in one study's cache: the
    second compiles from it. On the H200 (torch 2.11) every checkpointed Llama 8B trial
    missed it while the recompute preserved the RNG state (graphsafe_run_with_rng_state in
    the graph: inductor bypasses its FX-graph cache for it); a block without dropout no longer
    preserves it (workers/models/checkpointing.py)."""
    monkeypatch.setenv("AUTOTUNER_COMPILE_CACHE_DIR", str(tmp_path))
    config = _config(
        GPT2_2L, {"precision": "bf16", "attention": "flash", "checkpointing": "full"}
    ).model_copy(update={"study_id": "st-ckpt-cache"})
    config.knobs = config.knobs.model_copy(update={"compile_mode": "default"})
    first, second = (run_trial_process(config, timeout_s=600) for _ in range(2))
    for r in (first, second):
        assert r.status == TrialStatus.OK, f"{r.failure_class}: {r.error_message}"
    assert first.compile_cache_misses and not first.compile_cache_hits
    assert second.compile_cache_hits and not second.compile_cache_misses, (
        second.compile_cache_hits,
        second.compile_cache_misses,
    )
    print(f"compile: cold {first.compile_s:.1f} s, from the cache {second.compile_s:.1f} s")
