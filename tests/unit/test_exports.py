"""Every export format of a study's best config, loaded by the library it is written for, on the
CPU: transformers' TrainingArguments, lightning's Trainer, accelerate's config loader and launch
parser, torchtitan's key names (v0.2.2) through tomllib, and the plain PyTorch snippet run for
one optimizer step on a tiny GPT.

What the CPU cannot build is said where it happens: a GPU-measured study's Trainer is built with
accelerator="cpu", TrainingArguments with use_cpu=True, and tf32 (an Ampere+ GPU mode) is checked
to be refused for the GPU, not for a bad argument.
"""

from __future__ import annotations

import dataclasses
import sys
import tomllib
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
import yaml

from autotuner.spec import Knobs, ModelSpec
from autotuner.storage.session import Database
from autotuner.study.export import FORMATS, export_commands, render
from autotuner.study.operations import export_best

REPO = Path(__file__).resolve().parents[2]

# Variants over the knobs that change what each export says (one GPU, DDP, FSDP2, fp8, fp16).
SINGLE = {
    "micro_batch_size": 4,
    "grad_accum": 2,
    "precision": "bf16",
    "attention": "flash",
    "checkpointing": "selective",
    "optimizer": "adamw-fused",
    "vocab_pad_multiple": 64,
}
VARIANTS: dict[str, tuple[dict[str, Any], int]] = {
    "single-bf16-selective": (SINGLE, 1),
    "single-fp32-full-foreach": (
        {
            "precision": "fp32",
            "attention": "math",
            "checkpointing": "full",
            "optimizer": "adamw-foreach",
        },
        1,
    ),
    "ddp-fp16-powersgd": (
        {
            "precision": "fp16",
            "parallel": "ddp",
            "grad_compression": "powersgd",
            "ddp_bucket_cap_mb": 50,
            "ddp_static_graph": True,
            "nccl_algo": "Ring",
            "compile_mode": "max-autotune-no-cudagraphs",
        },
        2,
    ),
    "single-bf16-8bit-expandable": (
        {
            "precision": "bf16",
            "checkpointing": "none",
            "optimizer": "adamw-8bit",
            "allocator": "expandable",
        },
        1,
    ),
    "single-block-fused-ce": (
        {"compile_mode": "default", "compile_scope": "block", "kernels": "fused-ce"},
        1,
    ),
    "single-cce-fp16": ({"precision": "fp16", "kernels": "cce"}, 1),
    "single-block-liger-fp32": (
        {
            "precision": "fp32",
            "attention": "efficient",
            "compile_mode": "max-autotune-no-cudagraphs",
            "compile_scope": "block",
            "kernels": "liger",
        },
        1,
    ),
    "fsdp2-fp8": (
        {"precision": "fp8-rowwise", "parallel": "fsdp2", "checkpointing": "full"},
        4,
    ),
    "fsdp2-no-reshard-tf32": (
        {"precision": "tf32", "parallel": "fsdp2-no-reshard", "fsdp_reduce_dtype": "bf16"},
        8,
    ),
}

# torchtitan v0.2.2's JobConfig sections and the fields the export writes, from
# torchtitan/config/job_config.py at tag v0.2.2 (commit 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce).
TORCHTITAN_V022 = {
    "model": {"name", "flavor", "hf_assets_path", "tokenizer_path", "converters"},
    "training": {
        "dataset",
        "dataset_path",
        "local_batch_size",
        "global_batch_size",
        "seq_len",
        "max_norm",
        "steps",
        "enable_cpu_offload",
        "dtype",
        "mixed_precision_param",
        "mixed_precision_reduce",
        "gc_freq",
        "gc_debug",
        "dataloader",
    },
    "training.dataloader": {"num_workers", "persistent_workers", "pin_memory", "prefetch_factor"},
    "optimizer": {"name", "lr", "beta1", "beta2", "eps", "weight_decay", "implementation"},
    "compile": {"enable", "components", "backend"},
    "activation_checkpoint": {"mode", "selective_ac_option", "memory_budget", "early_stop"},
    "quantize.linear.float8": {
        "enable_fsdp_float8_all_gather",
        "precompute_float8_dynamic_scale_for_fsdp",
        "recipe_name",
        "filter_fqns",
        "emulate",
    },
    "parallelism": {
        "data_parallel_replicate_degree",
        "data_parallel_shard_degree",
        "fsdp_reshard_after_forward",
        "tensor_parallel_degree",
    },
}
TORCHTITAN_CHOICES = {
    ("training", "mixed_precision_param"): {"bfloat16", "float32"},
    ("optimizer", "implementation"): {"for-loop", "foreach", "fused"},
    ("activation_checkpoint", "mode"): {"selective", "full", "memory_budget", "none"},
    ("quantize.linear.float8", "recipe_name"): {"tensorwise", "rowwise", "rowwise_with_gw_hp"},
    ("parallelism", "fsdp_reshard_after_forward"): {"default", "always", "never"},
}
TORCHTITAN_CONVERTERS = {"quantize.linear.float8", "quantize.linear.mx"}


def _rec(knobs: dict[str, Any], gpus: int, device: str = "cuda") -> tuple[dict, dict]:
    """(recommendation, stored trial config) for these knobs, as the study stores them."""
    model = {"preset": "tiny"}
    full = Knobs.model_validate(knobs).model_dump(mode="json")
    rec = {
        "trial_number": 7,
        "tokens_per_s": 1234.0,
        "knobs": full,
        "model": model,
        "fingerprint": {"device_type": device},
    }
    config = {
        "model": ModelSpec.resolve(model).model_dump(mode="json"),
        "knobs": full,
        "num_gpus": gpus,
    }
    return rec, config


def _export(name: str, fmt: str) -> str:
    knobs, gpus = VARIANTS[name]
    rec, config = _rec(knobs, gpus)
    return render(rec, fmt, study_id="s1", config=config)


def _exec(snippet: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(snippet, "<export>", "exec"), namespace)
    return namespace


# --------------------------------------------------------------------------- the study itself


@pytest.fixture
def exported(finished_study: tuple[str, str]) -> dict[str, str]:
    """Every format of a finished (replayed) study's best config, through the export operation."""
    url, study_id = finished_study
    db = Database(url)
    return {fmt: export_best(db, study_id, fmt) for fmt in FORMATS}


def test_a_study_exports_to_every_trainer(exported: dict[str, str], tmp_path: Path) -> None:
    from transformers import TrainingArguments

    knobs = yaml.safe_load(exported["yaml"])["knobs"]
    # Hugging Face: the GPU study's bf16 needs use_cpu=True to build on this CPU.
    ns = _exec(exported["hf"])
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, **ns["training_args_kwargs"])
    assert args.per_device_train_batch_size == knobs["micro_batch_size"]
    assert args.bf16 == (knobs["precision"] == "bf16")
    assert args.gradient_checkpointing == (knobs["checkpointing"] != "none")
    assert args.torch_compile and args.torch_compile_mode == "default"
    assert str(args.optim.value) == (
        "adamw_torch_fused" if knobs["optimizer"] == "adamw-fused" else "adamw_torch"
    )
    assert ns["model_kwargs"] == {"attn_implementation": "sdpa"}  # flash: SDPA's kernel
    # Lightning: measured on a (fake) GPU; built here with accelerator="cpu".
    trainer = _lightning_trainer(exported["lightning"])
    assert trainer.accumulate_grad_batches == knobs["grad_accum"]
    # torchtitan, accelerate: parsed and checked by their rules below.
    _check_torchtitan(exported["torchtitan"], knobs)
    _load_accelerate(exported["accelerate"], tmp_path)
    # Plain PyTorch: one optimizer step of a tiny GPT through the snippet's own functions.
    _one_pytorch_step(exported["pytorch"], knobs)
    assert "AUTOTUNER_" not in exported["env"]


# --------------------------------------------------------------------------- per trainer


@pytest.mark.parametrize("name", VARIANTS)
def test_hf_training_arguments(name: str, tmp_path: Path) -> None:
    from transformers import TrainingArguments

    ns = _exec(_export(name, "hf"))
    kwargs = ns["training_args_kwargs"]
    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    assert set(kwargs) <= fields, set(kwargs) - fields
    if kwargs.get("tf32"):
        with pytest.raises(ValueError, match="Ampere"):  # a GPU mode: refused on the CPU
            TrainingArguments(output_dir=str(tmp_path), use_cpu=True, **kwargs)
        kwargs = {**kwargs, "tf32": None}
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, **kwargs)
    knobs, _ = VARIANTS[name]
    assert args.gradient_accumulation_steps == Knobs.model_validate(knobs).grad_accum
    assert args.fp16 == (knobs.get("precision") == "fp16")
    if knobs.get("parallel", "").startswith("fsdp"):
        assert args.fsdp_config["version"] == 2
    text = _export(name, "hf")
    if knobs.get("precision", "").startswith("fp8"):
        assert "# NOTE: fp8-rowwise: TrainingArguments has no float8 setting" in text
    if "vocab_pad_multiple" in knobs:
        assert "pad_to_multiple_of=64" in text
    if knobs.get("optimizer") == "adamw-8bit":  # torchao's AdamW8bit, as the trial ran
        assert str(args.optim.value) == "adamw_torch_8bit"
    # Liger: the Trainer's own switch; fused-ce alone through its config. Block scope: not the
    # Trainer's whole-model compile, the per-layer loop in a NOTE.
    assert args.use_liger_kernel == (knobs.get("kernels", "none") in ("fused-ce", "liger"))
    if knobs.get("kernels") == "cce":  # no Trainer setting: the loss to compute, in a NOTE
        assert "# NOTE: kernels=cce: TrainingArguments has no setting for cut-cross" in text
        assert "cut_cross_entropy.linear_cross_entropy(" in text
    if knobs.get("kernels") == "fused-ce":
        assert args.liger_kernel_config == {
            "rope": False,
            "rms_norm": False,
            "swiglu": False,
            "cross_entropy": False,
            "fused_linear_cross_entropy": True,
        }
    if knobs.get("checkpointing", "none") != "none":  # the 4.x name, and the 5.x one to use
        assert args.gradient_checkpointing
        assert "names gradient_checkpointing(_kwargs) activation_checkpointing" in text
    if knobs.get("compile_scope") == "block":
        assert not args.torch_compile
        mode = knobs["compile_mode"]
        assert f"for layer in model.model.layers: layer.compile(mode={mode!r})" in text


@pytest.mark.parametrize(
    "knobs", [SINGLE, VARIANTS["single-fp32-full-foreach"][0], {"precision": "tf32"}]
)
def test_hf_training_arguments_of_a_cpu_study_build_as_is(
    knobs: dict[str, Any], tmp_path: Path
) -> None:
    """A study measured on the CPU exports kwargs that TrainingArguments takes here as they are
    (issue 42: its bf16 was refused without use_cpu; tf32, a GPU mode, is refused on the CPU)."""
    from transformers import TrainingArguments

    rec, config = _rec(knobs, 1, device="cpu")
    text = render(rec, "hf", study_id="s1", config=config)
    args = TrainingArguments(output_dir=str(tmp_path), **_exec(text)["training_args_kwargs"])
    assert args.use_cpu and args.device.type == "cpu"
    assert args.bf16 == (Knobs.model_validate(knobs).precision.value == "bf16")
    assert not args.tf32
    if knobs.get("precision") == "tf32":
        assert "# NOTE: tf32 is a GPU mode" in text


@pytest.mark.parametrize("name", VARIANTS)
def test_lightning_trainer(name: str) -> None:
    knobs, _ = VARIANTS[name]
    trainer = _lightning_trainer(_export(name, "lightning"))
    precision = {"fp32": "32-true", "tf32": "32-true", "fp16": "bf16-mixed"}.get(
        knobs.get("precision", "bf16"), "bf16-mixed"
    )  # fp16 AMP does not exist on the CPU: Lightning itself switches it to bf16 there
    assert trainer.precision == precision
    strategy = type(trainer.strategy).__name__
    parallel = knobs.get("parallel")
    expected = {None: "SingleDeviceStrategy", "ddp": "DDPStrategy"}.get(
        parallel, "ModelParallelStrategy"
    )
    assert strategy == expected
    if parallel == "ddp":
        assert trainer.strategy._ddp_kwargs["bucket_cap_mb"] == knobs["ddp_bucket_cap_mb"]
        assert trainer.strategy._ddp_comm_hook.__name__ == "powerSGD_hook"
    text = _export(name, "lightning")  # the model-side knobs: what the LightningModule does
    if knobs.get("compile_scope") == "block":
        assert f"block.compile(mode={knobs['compile_mode']!r}) for each transformer block" in text
    owner = {"fused-ce": "Liger's", "liger": "Liger's", "cce": "cut-cross-entropy's"}
    if knobs.get("kernels", "none") != "none":
        assert f"{owner[knobs['kernels']]} fused linear cross-entropy" in text


def _lightning_trainer(snippet: str):
    import lightning

    kwargs = _exec(snippet)["trainer_kwargs"]
    kwargs["accelerator"] = "cpu"  # measured on GPUs; this machine has none
    return lightning.Trainer(**kwargs, logger=False, enable_checkpointing=False)


@pytest.mark.parametrize("name", VARIANTS)
def test_torchtitan_toml(name: str) -> None:
    knobs, _ = VARIANTS[name]
    _check_torchtitan(_export(name, "torchtitan"), Knobs.model_validate(knobs).model_dump())


def _check_torchtitan(text: str, knobs: dict[str, Any]) -> None:
    doc = tomllib.loads(text)
    flat: dict[str, dict[str, Any]] = {}
    for section, table in doc.items():
        for key, value in table.items():
            if isinstance(value, dict):  # [training.dataloader], [quantize.linear.float8]
                _flatten(f"{section}.{key}", value, flat)
            else:
                flat.setdefault(section, {})[key] = value
    for section, table in flat.items():
        assert section in TORCHTITAN_V022, section
        assert set(table) <= TORCHTITAN_V022[section], (section, set(table))
    for (section, key), choices in TORCHTITAN_CHOICES.items():
        if key in flat.get(section, {}):
            assert flat[section][key] in choices, (section, key)
    assert set(flat.get("model", {}).get("converters", [])) <= TORCHTITAN_CONVERTERS
    training = flat["training"]
    assert training["local_batch_size"] == knobs["micro_batch_size"]
    # torchtitan accumulates until the global batch: local x dp degree x accumulation.
    parallel = flat.get("parallelism", {})
    dp = max(
        parallel.get("data_parallel_replicate_degree", 1)
        * parallel.get("data_parallel_shard_degree", 1),
        1,
    )
    assert training["global_batch_size"] == knobs["micro_batch_size"] * dp * knobs["grad_accum"]
    assert flat["compile"]["enable"] == (str(knobs["compile_mode"]) != "none")
    if flat["compile"]["enable"]:  # block scope ran a fused kernels' loss eagerly
        loss = str(knobs["compile_scope"]) != "block" or knobs.get("kernels", "none") == "none"
        assert ("loss" in flat["compile"]["components"]) == loss


def _flatten(prefix: str, table: dict[str, Any], out: dict[str, dict[str, Any]]) -> None:
    for key, value in table.items():
        if isinstance(value, dict):
            _flatten(f"{prefix}.{key}", value, out)
        else:
            out.setdefault(prefix, {})[key] = value


@pytest.mark.parametrize("name", VARIANTS)
def test_accelerate_config(name: str, tmp_path: Path) -> None:
    knobs, gpus = VARIANTS[name]
    config, env = _load_accelerate(_export(name, "accelerate"), tmp_path)
    assert config.num_processes == gpus
    parallel = knobs.get("parallel")
    expected = "NO" if gpus == 1 else ("MULTI_GPU" if parallel == "ddp" else "FSDP")
    assert config.distributed_type.value == expected
    if env is not None and parallel and parallel.startswith("fsdp"):
        assert env["FSDP_VERSION"] == "2"
        assert env["FSDP_RESHARD_AFTER_FORWARD"] == str(parallel == "fsdp2").lower()
    if env is not None and "compile_mode" in knobs:
        assert env["ACCELERATE_DYNAMO_MODE"] == knobs["compile_mode"]
    if knobs.get("compile_scope") == "block":  # Accelerate's regional compilation
        assert config.dynamo_config["dynamo_use_regional_compilation"] is True


def _load_accelerate(text: str, tmp_path: Path):
    """accelerate's own loader, then `accelerate launch --config_file`'s argument handling and,
    for several processes, the environment it would start them with (None for fp8: accelerate
    refuses it without a float8 backend usable here, so the file is only loaded)."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    path = tmp_path / "accelerate.yaml"
    path.write_text(text)
    config = load_config_from_file(str(path))
    if config.mixed_precision == "fp8" or config.num_processes == 1:
        return config, None
    args = launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
    args, *_ = _validate_launch_command(args)
    return config, prepare_multi_gpu_env(args)


# --------------------------------------------------------------------------- plain PyTorch


@pytest.mark.parametrize(
    "name", ["single-bf16-selective", "single-fp32-full-foreach", "single-bf16-8bit-expandable"]
)
def test_pytorch_snippet_trains_one_step(name: str) -> None:
    if VARIANTS[name][0].get("optimizer") == "adamw-8bit":
        pytest.importorskip("torchao.optim")
    knobs, _ = VARIANTS[name]
    if Knobs.model_validate(knobs).attention.value in ("efficient", "cudnn"):
        # GPU-only SDPA kernels (the variant's study ran on a GPU): the CPU runs flash's.
        knobs = {**knobs, "attention": "flash"}
    rec, config = _rec(knobs, 1)
    snippet = render(rec, "pytorch", study_id="s1", config=config)
    _one_pytorch_step(snippet, Knobs.model_validate(knobs).model_dump())


def test_pytorch_snippet_compiles_each_block_under_block_scope() -> None:
    """compile_scope=block: prepare() compiles each block in place with the measured mode
    (one graph per block) and returns the model itself, and the loss over the logits is
    compiled on its own, as the trial's output region was; with Liger's kernels the snippet
    carries fused_loss, which needs CUDA: only its presence is checked here."""
    knobs = {**SINGLE, "compile_mode": "default", "compile_scope": "block"}
    rec, config = _rec(knobs, 1)
    snippet = render(rec, "pytorch", study_id="s1", config=config)
    assert (
        "        block.compile(mode='default')" in snippet and "torch.compile(model" not in snippet
    )
    assert "@torch.compile(mode='default')\ndef logits_loss(logits, y):" in snippet
    _one_pytorch_step(snippet, Knobs.model_validate(knobs).model_dump())
    fused = _exec(_export("single-block-fused-ce", "pytorch"))
    assert callable(fused["fused_loss"])
    cce = _export("single-cce-fp16", "pytorch")
    assert "from cut_cross_entropy import linear_cross_entropy" in cce
    assert "liger" not in cce and "(cut-cross-entropy, CUDA only)" in cce
    assert callable(_exec(cce)["fused_loss"])


def test_pytorch_snippet_ddp_on_one_gloo_rank(tmp_path: Path) -> None:
    """The DDP variant (bucket size, static graph, PowerSGD hook) runs under a one-rank gloo
    group; its fp16 scaler and max-autotune compile are left out: the CPU has neither (fp16
    autocast) nor time for them (an inductor compile)."""
    import torch.distributed as dist

    knobs = {
        **VARIANTS["ddp-fp16-powersgd"][0],
        "precision": "bf16",
        "compile_mode": "none",
        "attention": "flash",  # its default, efficient, is a GPU kernel
    }
    rec, config = _rec(knobs, 2)
    snippet = render(rec, "pytorch", study_id="s1", config=config)
    assert "register_comm_hook(powerSGD_hook.PowerSGDState(" in snippet
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        _one_pytorch_step(snippet, Knobs.model_validate(knobs).model_dump())
    finally:
        dist.destroy_process_group()


def _user_model(spec: ModelSpec) -> torch.nn.Module:
    """examples/my_model.py as a user brings it (the factory contract: token ids to logits),
    with plain causal SDPA as its attention: the snippet pins the kernel around the step."""
    import importlib.util

    import torch.nn.functional as F

    path = REPO / "examples" / "my_model.py"
    loaded = importlib.util.spec_from_file_location("my_model", path)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    sys.modules["my_model"] = module  # dynamo looks its functions' module up by name
    loaded.loader.exec_module(module)
    return module.build(
        vocab_size=spec.vocab_size,
        seq_len=spec.seq_len,
        n_layer=spec.n_layer,
        d_model=spec.d_model,
        n_head=spec.n_head,
        attend=lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    )


def _one_pytorch_step(snippet: str, knobs: dict[str, Any], steps: int = 3) -> None:
    """`steps` optimizer steps of the snippet's prepare()/train_step() on examples/my_model.py,
    over the same micro-batches each step: the loss is finite and falls."""
    ns = _exec(snippet)
    torch.manual_seed(0)
    spec = ModelSpec.resolve({"preset": "tiny"})
    model = _user_model(spec)
    before = [p.detach().clone() for p in model.parameters()]
    # The snippet's torch.compile runs through dynamo and AOT autograd (backend aot_eager), not
    # inductor: inductor's C++ build of the kernels (~40 s on a CPU) is torch's, and the worker
    # tests compile the same model with it. The mode the snippet asks for is checked.
    modes: list[str | None] = []
    real_compile = torch.compile

    def compile_without_inductor(fn: Any, *, mode: str | None = None, **kwargs: Any) -> Any:
        modes.append(mode)
        return real_compile(fn, backend="aot_eager", **kwargs)

    with mock.patch.object(torch, "compile", compile_without_inductor):
        runnable, optimizer = ns["prepare"](model, model.blocks)
    compiled = str(knobs["compile_mode"])
    assert set(modes) == (set() if compiled == "none" else {compiled})
    if knobs["checkpointing"] != "none":
        assert all(type(b).__name__ == "Checkpointed" for b in model.blocks)
    if knobs["optimizer"] == "adamw-8bit":
        assert type(optimizer).__name__ == "AdamW8bit"
    else:
        assert optimizer.defaults["fused" if knobs["optimizer"] == "adamw-fused" else "foreach"]
    g = torch.Generator().manual_seed(1)
    batch = int(knobs["micro_batch_size"])
    micro = [
        torch.randint(0, spec.vocab_size, (batch, spec.seq_len + 1), generator=g)
        for _ in range(int(knobs["grad_accum"]))
    ]
    pairs = [(x[:, :-1], x[:, 1:]) for x in micro]
    losses = []
    # torchao's AdamW8bit compiles its update per parameter shape: aot_eager here too.
    with mock.patch.object(torch, "compile", compile_without_inductor):
        for _ in range(steps):
            losses.append(float(ns["train_step"](runnable, optimizer, iter(pairs), "cpu")))
    assert all(torch.isfinite(torch.tensor(losses))), losses
    assert losses[-1] < losses[0], losses  # the same tokens each step: it learns them
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


# --------------------------------------------------------------------------- env, commands


def test_env_is_real_variables_only() -> None:
    text = _export("ddp-fp16-powersgd", "env")
    exports = dict(
        line.removeprefix("export ").split("=", 1)
        for line in text.splitlines()
        if line.startswith("export ")
    )
    assert exports["NCCL_ALGO"] == "Ring"
    assert exports["NCCL_NVLS_ENABLE"] == "0"  # measured with NVLink multicast off
    assert not any(name.startswith("AUTOTUNER_") for name in exports)
    one_gpu = _export("single-bf16-selective", "env")
    assert "nothing to set" in one_gpu


def test_the_allocator_knob_is_exported_as_the_variable_torch_reads() -> None:
    text = _export("single-bf16-8bit-expandable", "env")
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text.splitlines()
    assert "allocator=expandable" in text and "nothing to set" not in text
    assert "NCCL" not in text.replace("NCCL and", "")  # one GPU: no NCCL variable, no NCCL note
    # Every trainer's export points at it: the peak memory measured depends on it.
    for fmt in ("hf", "lightning", "torchtitan", "accelerate", "pytorch"):
        out = _export("single-bf16-8bit-expandable", fmt)
        assert "(PYTORCH_CUDA_ALLOC_CONF) before launching: --format env" in out, fmt
        assert "PYTORCH_CUDA_ALLOC_CONF" not in _export("single-bf16-selective", fmt), fmt


def test_export_commands_name_every_trainer_format() -> None:
    commands = dict(export_commands("abc"))
    for fmt in ("hf", "lightning", "torchtitan", "accelerate", "pytorch", "env"):
        assert f"autotuner export abc -f {fmt}" in commands


def test_best_prints_the_export_commands(finished_study: tuple[str, str]) -> None:
    from tests.unit.test_cli_errors import run_cli

    url, study_id = finished_study
    best = run_cli("best", study_id, "--db", url, env={"COLUMNS": "100"})
    assert best.returncode == 0, best.stderr
    lines = [line.strip() for line in best.stdout.splitlines()]
    for fmt in ("hf", "lightning", "torchtitan", "accelerate", "pytorch", "env"):
        assert any(line.startswith(f"autotuner export {study_id} -f {fmt} ") for line in lines)
