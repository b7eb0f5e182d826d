"""Every knob value either changes what runs on the CPU (asserted on the built step, not on
speed) or is refused as `unsupported` with a reason and the knob values to blame."""

from __future__ import annotations

import pytest
import torch

from autotuner.spec import FailureClass, TrialStatus
from workers import precision
from workers.data import LoaderBatches, SyntheticBatches
from workers.errors import EnvironmentProblem
from workers.trial import build_step, run_trial

from .conftest import fast, make_config

CPU = torch.device("cpu")


def _build(**knobs):
    info = {"notes": []}
    config = make_config(**knobs)
    step = build_step(config, CPU, info)
    return step, info


def _first_linear_output_dtype(step) -> torch.dtype:
    seen = []
    lin = next(m for m in step.model.modules() if isinstance(m, torch.nn.Linear))
    handle = lin.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    step()
    handle.remove()
    return seen[0]


@pytest.mark.parametrize(
    "value, dtype, scaled",
    [
        ("fp32", torch.float32, False),
        ("bf16", torch.bfloat16, False),
        ("fp16", torch.float16, True),
    ],
)
def test_precision_sets_autocast_dtype_and_loss_scaling(value, dtype, scaled):
    step, _ = _build(precision=value)
    assert _first_linear_output_dtype(step) == dtype
    assert (step.scaler is not None) == scaled
    # Master weights stay fp32 in every precision.
    assert all(p.dtype == torch.float32 for p in step.model.parameters())


def test_fp32_turns_tf32_off():
    precision.set_matmul_precision(precision.Precision.FP32, "cpu")
    assert torch.get_float32_matmul_precision() == "highest"


@pytest.mark.parametrize(
    "knobs, blamed",
    [
        ({"precision": "tf32"}, {"precision": "tf32"}),
        ({"precision": "fp8-tensorwise"}, {"precision": "fp8-tensorwise"}),
        ({"precision": "fp8-rowwise"}, {"precision": "fp8-rowwise"}),
        ({"compile_mode": "reduce-overhead"}, {"compile_mode": "reduce-overhead"}),
        ({"compile_mode": "max-autotune"}, {"compile_mode": "max-autotune"}),
        ({"attention": "efficient"}, {"attention": "efficient"}),
        ({"attention": "cudnn"}, {"attention": "cudnn"}),
        ({"attention": "flex"}, {"attention": "flex"}),
        ({"kernels": "fused-ce"}, {"kernels": "fused-ce"}),
        ({"kernels": "liger"}, {"kernels": "liger"}),
        ({"kernels": "cce"}, {"kernels": "cce"}),
    ],
)
def test_values_without_a_cpu_kernel_are_unsupported_with_a_remedy(knobs, blamed):
    result = run_trial(make_config(**knobs))
    assert result.status == TrialStatus.FAILED
    assert result.failure_class == FailureClass.UNSUPPORTED
    assert result.unsupported_knobs == blamed
    assert " use " in result.error_message  # a remedy, not just a refusal
    assert result.param_count is None  # refused before anything was built


@pytest.mark.parametrize("value, fused", [("adamw-foreach", False), ("adamw-fused", True)])
def test_optimizer_implementation(value, fused):
    step, _ = _build(optimizer=value)
    defaults = step.optimizer.defaults
    assert bool(defaults["fused"]) == fused
    assert bool(defaults["foreach"]) == (not fused)
    before = [p.detach().clone() for p in step.optimizer.param_groups[0]["params"]]
    step()
    after = step.optimizer.param_groups[0]["params"]
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))


@pytest.mark.slow  # torchao's 8-bit step compiles on the CPU
def test_the_8bit_optimizer_keeps_8bit_moments_and_trains() -> None:
    """adamw-8bit is torchao's AdamW8bit: the matrices' moments are 8-bit tensors (a quarter
    of fp32's bytes), and a trial with it runs and measures."""
    pytest.importorskip("torchao.optim")
    from torchao.optim.subclass_8bit import OptimState8bit

    result = run_trial(make_config(optimizer="adamw-8bit"))
    assert result.status == TrialStatus.OK, result.error_message
    step, _ = _build(optimizer="adamw-8bit")
    step()
    matrices = [p for p in step.optimizer.param_groups[0]["params"] if p.numel() >= 4096]
    assert matrices
    for p in matrices:
        state = step.optimizer.state[p]
        assert isinstance(state["exp_avg"], OptimState8bit)
        assert state["exp_avg"].codes.dtype == torch.uint8
        assert state["exp_avg"].codes.numel() == p.numel()


def test_the_8bit_optimizer_without_torchao_is_an_environment_failure(monkeypatch) -> None:
    """The space asked for adamw-8bit and the worker lacks torchao: not a property of the
    config (the study stops with the install line rather than tune without it)."""
    import importlib.util

    from workers import support

    real = importlib.util.find_spec
    monkeypatch.setattr(
        support.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "torchao" else real(name, *a),
    )
    refusal = support.static_check(make_config(optimizer="adamw-8bit"), CPU)
    assert isinstance(refusal, EnvironmentProblem)
    assert "pip install torchao" in str(refusal)
    assert support.static_check(make_config(optimizer="adamw-fused"), CPU) is None


@pytest.mark.parametrize("mode", ["default", "max-autotune-no-cudagraphs"])
def test_compile_mode_wraps_the_model_with_that_mode(mode, monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "compile", lambda model, mode: calls.append(mode) or model)
    step, _ = _build(compile_mode=mode)
    assert calls == [mode]
    assert step.cudagraphs is False


def test_compile_none_runs_eager():
    step, _ = _build(compile_mode="none")
    assert not isinstance(step.model, torch._dynamo.eval_frame.OptimizedModule)


def test_compiled_trial_really_compiles_and_reports_compile_time():
    torch._dynamo.reset()
    result = run_trial(make_config(compile_mode="default", attention="flash"))
    assert result.status == TrialStatus.OK, result.error_message
    assert result.compile_s is not None and result.compile_s > 0
    assert result.first_step_s > result.step_time_s  # compile stays out of the steady step
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1


@pytest.mark.parametrize("micro_batch, accum", [(1, 1), (4, 3)])
def test_micro_batch_and_grad_accum_are_really_applied(micro_batch, accum):
    step, _ = _build(micro_batch_size=micro_batch, grad_accum=accum)
    shapes = []
    handle = step.model.register_forward_pre_hook(lambda m, args: shapes.append(args[0].shape))
    step()
    handle.remove()
    assert shapes == [torch.Size([micro_batch, 64])] * accum  # accum forwards per optimizer step


def test_micro_batch_changes_tokens_per_step_and_throughput():
    small = run_trial(make_config(micro_batch_size=1))
    large = run_trial(make_config(micro_batch_size=16))
    assert small.status == large.status == TrialStatus.OK
    assert (small.tokens_per_step, large.tokens_per_step) == (64, 1024)
    assert small.tokens_per_s > 0 and large.tokens_per_s > 0
    assert small.tokens_per_s != large.tokens_per_s


def test_synthetic_data_replays_fixed_batches_on_the_device():
    _, info = _build(grad_accum=2)  # measure.data_source defaults to synthetic
    batches = info["_batches"]
    assert isinstance(batches, SyntheticBatches)
    first = [batches.next()[0].clone() for _ in range(2)]
    again = [batches.next()[0] for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))


def test_loader_uses_a_real_dataloader_with_the_knobs():
    _, info = _build(
        measure=fast(data_source="loader"), loader_workers=2, prefetch_factor=3, pin_memory=True
    )
    batches = info["_batches"]
    try:
        assert isinstance(batches, LoaderBatches)
        loader = batches.loader
        assert (loader.num_workers, loader.prefetch_factor) == (2, 3)
        assert loader.pin_memory is False  # nothing to pin for on the CPU (reported inactive)
        x, y = batches.next()
        assert x.shape == (1, 64) and torch.equal(x[0, 1:], y[0, :-1])
    finally:
        batches.close()


def test_loader_trial_runs_and_reports_inactive_knobs():
    result = run_trial(make_config(measure=fast(data_source="loader"), loader_workers=0))
    assert result.status == TrialStatus.OK, result.error_message
    assert any("prefetch_factor" in n and "pin_memory" in n for n in result.notes)


@pytest.mark.parametrize("checkpointing", ["none", "selective", "full"])
def test_checkpointing_trials_run(checkpointing):
    result = run_trial(make_config("llama-tiny", checkpointing=checkpointing, attention="flash"))
    assert result.status == TrialStatus.OK, result.error_message


def test_vocab_padding_does_not_change_flops_per_token():
    results = [
        run_trial(make_config(model={"vocab_size": 1025}, vocab_pad_multiple=m))
        for m in (1, 64, 128)
    ]
    assert all(r.status == TrialStatus.OK for r in results)
    assert len({r.flops_per_token for r in results}) == 1  # padding is wasted work, not MFU
    assert results[0].param_count < results[1].param_count < results[2].param_count


def test_ok_result_is_complete():
    r = run_trial(make_config())
    assert r.status == TrialStatus.OK
    assert r.tokens_per_s_min <= r.tokens_per_s <= r.tokens_per_s_max
    assert len(r.repeat_tokens_per_s) == 2 and r.steps_per_repeat >= 1
    assert r.tokens_per_step == 64 and r.loss_last < r.loss_first
    assert r.memory_kind == "cpu_rss" and r.peak_mem_gib > 0
    assert r.mfu is None and r.peak_flops is None  # no peak for a CPU
    assert r.fingerprint.device_type == "cpu" and r.telemetry is None
    assert r.flops_per_token > 0 and r.first_step_s > 0 and r.warmup_steps >= 1


def test_peak_flops_override_gives_mfu_on_cpu():
    config = make_config()
    config.measure = config.measure.model_copy(update={"peak_flops": 1e12})
    r = run_trial(config)
    assert r.mfu == pytest.approx(r.tokens_per_s * r.flops_per_token / 1e12)
    assert r.peak_flops_source.startswith("measure.peak_flops")


def test_multi_gpu_is_refused_honestly():
    config = make_config()
    config.num_gpus = 2
    r = run_trial(config)
    assert r.failure_class == FailureClass.UNSUPPORTED and "num_gpus" in r.error_message
