"""An Accelerate config file (YAML) for `accelerate launch --config_file FILE train.py`.

Keys are those `accelerate config` writes (accelerate >= 1.4: fsdp_version 2, fp8 backend "AO"
for torchao); the test loads the file with accelerate's own loader and launch-argument parser.
Batch size and accumulation are training-script arguments in Accelerate
(`Accelerator(gradient_accumulation_steps=...)`), so they are listed in a comment.
"""

from __future__ import annotations

from typing import Any

from autotuner.spec import Checkpointing
from autotuner.study.export.facts import Facts

_MIXED_PRECISION = {None: "no", "bfloat16": "bf16", "float16": "fp16"}
# grad_compression -> accelerate.utils.DDPCommunicationHookType member.
_COMM_HOOK = {"fp16": "FP16", "bf16": "BF16", "powersgd": "POWER_SGD"}


def render(f: Facts) -> str:
    k = f.knobs
    notes = [
        f"in the script: Accelerator(gradient_accumulation_steps={k.grad_accum}) and "
        f"DataLoader(batch_size={k.micro_batch_size}, num_workers={k.loader_workers}, "
        f"pin_memory={k.pin_memory}"
        + (f", prefetch_factor={k.prefetch_factor}" if k.loader_workers > 0 else "")
        + ")"
    ]
    cpu = f.device_type != "cuda"
    if not f.distributed:
        distributed_type = "NO"
        notes.append("one process: Accelerate adds nothing for data parallelism here")
    elif f.sharded:
        distributed_type = "FSDP"
    else:
        distributed_type = "MULTI_CPU" if cpu else "MULTI_GPU"
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": distributed_type,
        "mixed_precision": "fp8" if f.fp8_recipe else _MIXED_PRECISION[f.amp_dtype],
        "num_processes": f.num_gpus,
        "num_machines": 1,
        "machine_rank": 0,
        "main_training_function": "main",
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": cpu,
        "debug": False,
        "downcast_bf16": "no",
    }
    if not cpu:
        config["gpu_ids"] = "all"
    if f.fp8_recipe:
        config["fp8_config"] = {"backend": "AO"}
        notes.append(
            f"fp8: Accelerate's AO backend is torchao float8; pass "
            f"AORecipeKwargs(config=Float8LinearConfig.from_recipe_name({f.fp8_recipe!r})) to "
            "Accelerator(kwargs_handlers=[...]) for the measured recipe"
        )
    if f.compile_mode:
        config["dynamo_config"] = {"dynamo_backend": "INDUCTOR", "dynamo_mode": f.compile_mode}
    if f.block_compile:
        config["dynamo_config"]["dynamo_use_regional_compilation"] = True
        notes.append(
            "compile_scope=block: Accelerate's regional compilation compiles each repeated "
            "block and the rest of the model separately, as the trial did (its rest: the "
            "output layer with the loss)"
        )
    if f.kernels_label:
        notes.append(
            f"kernels={f.kernels.value}: Accelerate has no setting for {f.kernels_label}; "
            "apply them in the model (--format pytorch has the calls)"
        )
    if f.sharded:
        config["fsdp_config"] = {
            "fsdp_version": 2,
            "fsdp_reshard_after_forward": f.reshard_after_forward,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_activation_checkpointing": f.checkpointing != Checkpointing.NONE,
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_offload_params": False,
            "fsdp_cpu_ram_efficient_loading": False,
        }
        if k.fsdp_reduce_dtype == "bf16":
            notes.append("fsdp_reduce_dtype=bf16 has no Accelerate config key")
    elif f.checkpointing != Checkpointing.NONE:
        notes.append(
            f"checkpointing {f.checkpointing.value!r} has no Accelerate key outside FSDP: apply "
            "it in the model (--format pytorch)"
        )
    if f.checkpointing == Checkpointing.SELECTIVE and f.sharded:
        notes.append("fsdp_activation_checkpointing recomputes whole blocks, not 'selective'")
    if f.distributed and not f.sharded:
        notes.append(
            f"DDP settings go in DistributedDataParallelKwargs(bucket_cap_mb="
            f"{k.ddp_bucket_cap_mb}, gradient_as_bucket_view={k.ddp_grad_as_bucket_view}, "
            f"static_graph={k.ddp_static_graph}"
            + (
                f", comm_hook=DDPCommunicationHookType.{_COMM_HOOK[k.grad_compression]}"
                if k.grad_compression != "none"
                else ""
            )
            + ")"
        )
    notes.append(
        f"model-side knobs (attention {f.attention.value!r}, "
        f"{f.optimizer_label}) are in the script: --format pytorch"
    )
    if note := f.env_note:
        notes.append(note)
    lines = [
        *f.header(),
        "# Accelerate config: accelerate launch --config_file THIS_FILE train.py",
        *(f"# NOTE: {note}" for note in notes),
    ]
    import yaml  # here: loading the export formats (`best` lists them) parses no YAML

    return "\n".join(lines) + "\n" + yaml.safe_dump(config, sort_keys=False)
