"""Compatibility rules: built-in, per space, and learned from `unsupported` results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotuner.executors.base import Target
from autotuner.executors.replay import Landscape
from autotuner.inputs import load_model_spec
from autotuner.search.rules import LearnedRules, incompatibility
from autotuner.search.space import load_space
from autotuner.spec import (
    CompileMode,
    CompileScope,
    FailureClass,
    Kernels,
    Knobs,
    ModelSpec,
    TrialResult,
)
from autotuner.storage.models import TrialState
from tests.search.conftest import GPT2, H200, KNOBS, gpt2_landscape, gpt2_space, make_policy

A100 = Target("cuda", 1, "NVIDIA A100-SXM4-80GB", (8, 0), 80.0)
V100 = Target("cuda", 1, "Tesla V100", (7, 0), 32.0)
CPU = Target("cpu", 0)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hf"


def _why(target: Target, model: ModelSpec | None = GPT2, gpus: int = 1, **knobs: Any) -> str:
    return incompatibility(Knobs(**knobs), target, model, gpus) or ""


def test_builtin_rules_are_hardware_aware() -> None:
    assert "fp16 or bf16" in _why(H200, precision="fp32", attention="flash")
    assert "fp16 or bf16" in _why(H200, precision="tf32", attention="cudnn")
    assert _why(H200, precision="bf16", attention="flash") == ""
    assert "8.9" in _why(A100, precision="fp8-rowwise", attention="flash")
    assert _why(H200, precision="fp8-rowwise", attention="flash") == ""
    assert "8.0" in _why(V100, precision="bf16", attention="efficient")
    assert "8.0" in _why(V100, precision="fp16", attention="flash")
    assert "CUDA" in _why(CPU, precision="fp32", attention="efficient")
    assert "CUDA graphs" in _why(
        CPU, precision="fp32", attention="math", compile_mode="reduce-overhead"
    )
    assert "fp32" in _why(CPU, precision="tf32", attention="math")
    assert _why(CPU, precision="fp32", attention="math", compile_mode="default") == ""


def test_shape_and_single_gpu_rules() -> None:
    odd = ModelSpec.resolve(
        {
            "family": "gpt2",
            "n_layer": 2,
            "d_model": 300,
            "n_head": 4,
            "vocab_size": 512,
            "seq_len": 64,
        }
    )  # head_dim 75
    assert "head_dim" in _why(H200, model=odd, precision="bf16", attention="flash")
    assert "multiples of 16" in _why(
        H200, model=odd, precision="fp8-tensorwise", attention="efficient"
    )
    assert "one GPU" in _why(H200, precision="bf16", attention="flash", nccl_algo="Ring")
    assert _why(H200, gpus=2, precision="bf16", attention="flash", nccl_algo="Ring") == ""


def test_flash_is_judged_on_the_configs_head_width() -> None:
    """Gemma 2 2B runs 8 heads of 256 (its config's head_dim) on a 2304-wide stream: flash
    attention takes it. Read as d_model / n_head (288) it was ruled out for every config."""
    gemma = load_model_spec(EXAMPLES / "gemma-2-2b.yaml")
    assert gemma.head_dim == 256
    assert gemma.hf_config is not None
    uncapped = {**gemma.hf_config, "attn_logit_softcapping": None}  # flash's other rule, below
    gemma = gemma.model_copy(update={"hf_config": uncapped})
    assert _why(H200, model=gemma, precision="bf16", attention="flash") == ""


def test_a_model_that_caps_its_attention_logits_runs_flex_or_math_and_the_expert_takes_flex() -> (
    None
):
    """Gemma 2 caps its attention logits (attn_logit_softcapping 50): SDPA's fused kernels
    cannot, and run there it would train another model (transformers refuses SDPA for it).
    FlexAttention takes the cap as a score function: the expert default's kernel."""
    gemma = load_model_spec(EXAMPLES / "gemma-2-2b.yaml")
    for attention in ("flash", "cudnn", "efficient"):
        why = _why(H200, model=gemma, precision="bf16", attention=attention)
        assert f"attention={attention} cannot cap" in why, why
        assert "attn_logit_softcapping 50" in why and "use attention=flex" in why
    for attention in ("flex", "math"):
        assert _why(H200, model=gemma, precision="bf16", attention=attention) == ""
    policy = make_policy(load_space("single-gpu"), model=gemma, target=H200)
    assert policy.expert_params()["attention"] == "flex"


def test_a_sliding_window_shorter_than_the_sequence_runs_flex_or_math() -> None:
    """Gemma 3's local layers attend 512 tokens back: at seq_len 4096 the fused SDPA kernels
    would attend further (another model). Gemma 2's 4096 at 4096 limits nothing, and Qwen2's
    window applies only with use_sliding_window."""
    local = {"sliding_window": 512, "attn_logit_softcapping": None}
    gemma = load_model_spec(EXAMPLES / "gemma-2-2b.yaml")
    assert gemma.attention_window is None  # 4096 at seq_len 4096
    assert gemma.hf_config is not None
    windowed = gemma.model_copy(update={"hf_config": {**gemma.hf_config, **local}})
    assert windowed.attention_window == 512
    why = _why(H200, model=windowed, precision="bf16", attention="flash")
    assert "cannot keep a sliding window" in why and "512 tokens back" in why, why
    assert "use attention=flex" in why and "seq_len <= 512" in why
    assert _why(H200, model=windowed, precision="bf16", attention="flex") == ""
    qwen = load_model_spec(EXAMPLES / "qwen2.5-1.5b-instruct.yaml")
    assert qwen.hf_config is not None
    off = {**qwen.hf_config, "sliding_window": 512, "use_sliding_window": False}
    assert qwen.model_copy(update={"hf_config": off}).attention_window is None


def test_attention_dropout_rules_out_flex_only() -> None:
    dropped = _hf("gpt2").model_copy(
        update={"hf_config": {"model_type": "gpt2", "attn_pdrop": 0.1}}
    )
    assert dropped.attention_dropout == 0.1
    why = _why(H200, model=dropped, precision="bf16", attention="flex")
    assert "attention=flex drops nothing out" in why and "0.1" in why, why
    for attention in ("flash", "math"):
        assert _why(H200, model=dropped, precision="bf16", attention=attention) == ""


def _hf(model_type: str) -> ModelSpec:
    config = {
        "model_type": model_type,
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 512,
        "max_position_embeddings": 64,
    }
    return ModelSpec.resolve({"hf_config": config, "seq_len": 64})


def test_compile_scope_and_kernel_rules() -> None:
    bf16 = {"precision": "bf16", "attention": "flash"}
    # Block scope with nothing compiled is the eager config again.
    why = _why(H200, compile_mode="none", compile_scope="block", **bf16)
    assert "does nothing with compile_mode=none" in why and "re-measure" in why
    assert _why(H200, compile_mode="default", compile_scope="block", **bf16) == ""
    cpu_block = {"precision": "fp32", "attention": "math", "compile_scope": "block"}
    assert _why(CPU, compile_mode="default", **cpu_block) == ""
    # Liger's kernels are Triton: CUDA only, whichever of the two.
    for kernels in ("fused-ce", "liger"):
        why = _why(CPU, precision="fp32", attention="math", kernels=kernels)
        assert "need a CUDA GPU" in why and "kernels" in why
    # The built-in families are covered (GPT-2's tied embedding is fine for the fused loss).
    assert _why(H200, kernels="liger", **bf16) == ""
    assert _why(H200, kernels="fused-ce", **bf16) == ""
    # fp8 leaves the output layer in bf16 (workers/precision.py): the fused loss still applies.
    assert _why(H200, kernels="fused-ce", precision="fp8-tensorwise", attention="flash") == ""
    # A Hugging Face architecture Liger does not patch: liger pruned naming what it covers,
    # fused-ce still allowed.
    why = _why(H200, model=_hf("gpt_neox"), kernels="liger", **bf16)
    assert "'gpt_neox'" in why and "Liger 0.8.5" in why and "qwen3" in why and "fused-ce" in why
    assert _why(H200, model=_hf("gpt_neox"), kernels="fused-ce", **bf16) == ""
    assert _why(H200, model=_hf("qwen2"), kernels="liger", **bf16) == ""
    factory = GPT2.model_copy(update={"family": "factory", "factory": "m.py:build"})
    assert "factory model returns logits" in _why(H200, model=factory, kernels="fused-ce", **bf16)


def test_cce_rules_cuda_half_precision_and_any_model_with_an_output_layer() -> None:
    bf16 = {"precision": "bf16", "attention": "flash"}
    why = _why(CPU, precision="fp32", attention="math", kernels="cce")
    assert "cut-cross-entropy's Triton kernels" in why and "need a CUDA GPU" in why
    # Its backward kernel takes half inputs only: fp32 and tf32 are refused, naming both knobs.
    for precision in ("fp32", "tf32"):
        why = _why(H200, kernels="cce", precision=precision, attention="efficient")
        assert "half-precision inputs" in why and precision in why and "fused-ce" in why
    for precision in ("bf16", "fp16", "fp8-tensorwise", "fp8-rowwise"):
        assert _why(H200, kernels="cce", precision=precision, attention="flash") == ""
    # No architecture table: the fused loss needs the output layer only (softcap included).
    assert _why(H200, model=_hf("gpt_neox"), kernels="cce", **bf16) == ""
    assert _why(H200, model=_hf("gemma2"), kernels="cce", **bf16) == ""
    factory = GPT2.model_copy(update={"family": "factory", "factory": "m.py:build"})
    assert "factory model returns logits" in _why(H200, model=factory, kernels="cce", **bf16)


def test_each_fused_loss_needs_its_own_package() -> None:
    from autotuner.spec import Hardware, RuleKind, packages_needed, support_verdicts

    def needs(kernels: str, packages: frozenset[str]) -> list[str]:
        knobs = Knobs(kernels=kernels, precision="bf16", attention="flash")
        verdicts = support_verdicts(knobs, Hardware("cuda", (9, 0)), packages=packages)
        return [v.message for v in verdicts if v.kind == RuleKind.NEEDS_PACKAGE]

    (missing,) = needs("cce", frozenset({"liger_kernel"}))
    assert "cut_cross_entropy" in missing and "pip install cut-cross-entropy" in missing
    assert needs("cce", frozenset({"cut_cross_entropy"})) == []
    assert needs("fused-ce", frozenset({"cut_cross_entropy"}))  # Liger's, not CCE's
    assert packages_needed(Knobs(kernels="cce")) == {"cut_cross_entropy"}


@pytest.mark.parametrize("guided", [False, True])
def test_no_impossible_config_is_launched(db, run_study, guided: bool) -> None:
    _, executor, trials, _ = run_study(db, trials=25, options={"guided": guided})
    assert executor.submitted
    for config in executor.submitted:
        assert incompatibility(config.knobs, H200, GPT2, 1) is None
    pruned = [t for t in trials if t.state == TrialState.PRUNED and t.error_class == "unsupported"]
    if not guided:  # the throughput model's proposals are screened before they are made
        assert pruned, "fp32 with flash is in the space: the sampler proposes it and it is pruned"
    assert all("fp16 or bf16" in (t.error_message or "") for t in pruned)


def _refusing(landscape: Landscape, attention: str, named: dict[str, Any] | None) -> Landscape:
    """The same landscape, except that a worker refuses one attention backend."""
    entries = []
    for params, result in landscape.entries:
        if params["attention"] == attention:
            result = TrialResult.failure(
                FailureClass.UNSUPPORTED,
                f"no {attention} kernel on this worker",
                unsupported_knobs=named,
                wall_s=3.0,
            )
        entries.append((params, result))
    return Landscape(entries)


def test_unsupported_named_by_the_worker_is_learned_and_never_proposed_again(db, run_study) -> None:
    landscape = _refusing(gpt2_landscape(), "efficient", {"attention": "efficient"})
    _, executor, trials, rec = run_study(
        db, landscape=landscape, trials=30, seed=3, options={"expert_seed": False}
    )
    launched = [c for c in executor.submitted if c.knobs.attention == "efficient"]
    assert len(launched) == 1, "the first refusal teaches the rule; no second efficient trial"
    learned = [t for t in trials if "learned from trial" in (t.error_message or "")]
    assert learned and all(t.params["attention"] == "efficient" for t in learned)
    assert rec is not None and any("attention=efficient" in r for r in rec["learned_rules"])


def test_unsupported_without_named_knobs_falls_back_to_the_kernel_projection(db, run_study) -> None:
    landscape = _refusing(gpt2_landscape(), "efficient", None)
    runner, executor, _trials, _ = run_study(
        db, landscape=landscape, trials=30, seed=3, options={"expert_seed": False}
    )
    # Narrower rule: (attention, precision, compile_mode) of the refusal, so at most one
    # launch per such combination.
    seen = [
        (c.knobs.precision, c.knobs.compile_mode)
        for c in executor.submitted
        if c.knobs.attention == "efficient"
    ]
    assert seen and len(seen) == len(set(seen))
    rule = runner.policy.learned.rules[0]
    assert {k for k, _ in rule.match} == {"attention", "precision", "compile_mode"}


def test_learned_rules_survive_a_restart(db, run_study) -> None:
    landscape = _refusing(gpt2_landscape(), "efficient", {"attention": "efficient"})
    runner, _, _, _ = run_study(
        db, landscape=landscape, trials=30, seed=3, options={"expert_seed": False}
    )
    from autotuner.executors.replay import ReplayExecutor
    from autotuner.study.coordinator import StudyRunner

    again = StudyRunner(db, runner.study_id, ReplayExecutor(landscape, list(runner.space.knobs)))
    with db.session() as s:  # reopen the finished study as if it had been interrupted
        from autotuner.storage.models import Study, StudyStatus

        s.get(Study, runner.study_id).status = StudyStatus.RUNNING.value
    again.start()
    assert again.policy.learned.violated_by(Knobs(attention="efficient")) is not None
    assert again.policy.screen({"attention": "efficient"}, Knobs(attention="efficient"))


def test_parallel_rules_follow_what_the_multi_gpu_worker_runs() -> None:
    bf16 = {"precision": "bf16", "attention": "flash"}
    # One GPU per trial: no parallel knob can change what runs.
    assert "one GPU" in _why(H200, gpus=1, parallel="fsdp2", **bf16)
    assert "one GPU" in _why(H200, gpus=1, nccl_buffsize=1 << 22, **bf16)
    # Several: what the worker refuses, said with the fix.
    assert _why(H200, gpus=2, parallel="ddp", **bf16) == ""
    assert _why(H200, gpus=2, parallel="fsdp2", fsdp_reduce_dtype="bf16", **bf16) == ""
    assert "several nodes" in _why(H200, gpus=2, parallel="hsdp", **bf16)
    assert "CUDA graphs" in _why(H200, gpus=2, compile_mode="reduce-overhead", **bf16)
    assert "fsdp_reduce_dtype=bf16" in _why(
        H200, gpus=2, parallel="fsdp2", grad_compression="bf16", **bf16
    )
    assert "parallel=ddp" in _why(
        H200, gpus=2, parallel="fsdp2-no-reshard", precision="fp16", attention="flash"
    )
    # Settings of the other parallelism would re-measure the same config.
    assert "does nothing under parallel=fsdp2" in _why(
        H200, gpus=2, parallel="fsdp2", ddp_bucket_cap_mb=100, **bf16
    )
    assert "does nothing under parallel=ddp" in _why(
        H200, gpus=2, parallel="ddp", fsdp_reduce_dtype="bf16", **bf16
    )
    # CPU trials use gloo: NCCL settings and NCCL-only hooks do nothing or cannot run.
    cpu = {"precision": "fp32", "attention": "math"}
    assert "gloo" in _why(CPU, gpus=2, nccl_algo="Ring", **cpu)
    assert "NCCL" in _why(CPU, gpus=2, grad_compression="bf16", **cpu)
    assert _why(CPU, gpus=2, grad_compression="fp16", **cpu) == ""


def test_configs_off_the_global_batch_are_pruned_before_launch(db, run_study) -> None:
    from tests.search.conftest import gpt2_space

    space = gpt2_space({"micro_batch_size": [4, 8, 16, 24], "precision": ["bf16", "fp32"]})
    space = space.model_copy(update={"global_batch_tokens": 32 * 1024})
    _, _, trials, _ = run_study(db, space=space, trials=12, options={"rules": False})
    launched = [t for t in trials if t.state != TrialState.PRUNED]
    assert launched and all(t.params["micro_batch_size"] != 24 for t in launched)
    assert all(
        t.config["knobs"]["micro_batch_size"] * t.config["knobs"]["grad_accum"] == 32
        for t in launched
    )
    pruned = [t for t in trials if t.params["micro_batch_size"] == 24]
    assert all("global batch" in (t.error_message or "") for t in pruned)


def _failing_to_compile(landscape: Landscape, compile_mode: str) -> Landscape:
    """The same landscape, except that every config of one compile mode fails to compile
    (no knob named), as GPT-2 with reduce-overhead and accumulation did on the H200."""
    entries = []
    for params, result in landscape.entries:
        if params["compile_mode"] == compile_mode:
            result = TrialResult.failure(
                FailureClass.COMPILE_ERROR,
                "accessing tensor output of CUDAGraphs that has been overwritten",
                wall_s=24.0,
            )
        entries.append((params, result))
    return Landscape(entries)


def test_a_knob_value_that_keeps_failing_to_compile_is_learned_after_two(db, run_study) -> None:
    knobs = {**KNOBS, "compile_mode": ["none", "default", "reduce-overhead"]}
    landscape = _failing_to_compile(gpt2_landscape(knobs), "reduce-overhead")
    runner, executor, trials, rec = run_study(
        db, space=gpt2_space(knobs), landscape=landscape, trials=30, seed=1
    )
    launched = [c for c in executor.submitted if c.knobs.compile_mode == "reduce-overhead"]
    assert len(launched) == 2, "two failures that share only that value teach the rule"
    rule = runner.policy.learned.violated_by(Knobs(compile_mode="reduce-overhead"))
    assert rule is not None and rule.match == (("compile_mode", "reduce-overhead"),)
    assert rec is not None and any(
        "compile_mode=reduce-overhead" in r and "never ran" in r for r in rec["learned_rules"]
    )
    # The values the failures shared with configs that ran (bf16, flash, ...) stay searchable.
    assert all(len(r.match) == 1 for r in runner.policy.learned.rules)
    assert any(t.state == TrialState.COMPLETE.value for t in trials)


def test_a_failure_blamed_on_the_compile_scope_spares_the_same_config_run_eagerly() -> None:
    """The whole-model compile of Liger's kernels fails (the worker blames kernels and
    compile_scope model); eager configs carry compile_scope model too, where it compiles
    nothing, so the learned rule must not prune them."""
    learned = LearnedRules()
    compiled = Knobs(kernels=Kernels.LIGER, compile_mode=CompileMode.DEFAULT)
    learned.learn(compiled, {"kernels": "liger", "compile_scope": "model"}, 4, "cannot trace")
    assert learned.violated_by(compiled) is not None
    assert (
        learned.violated_by(
            compiled.model_copy(update={"compile_mode": CompileMode.MAX_AUTOTUNE_NO_CUDAGRAPHS})
        )
        is not None
    )
    eager = compiled.model_copy(update={"compile_mode": CompileMode.NONE})
    assert learned.violated_by(eager) is None
    blocks = compiled.model_copy(update={"compile_scope": CompileScope.BLOCK})
    assert learned.violated_by(blocks) is None
