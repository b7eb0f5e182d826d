"""A torchtitan job-config TOML fragment: merge its sections into your train config.

Key names are torchtitan v0.2.2's JobConfig (torchtitan/config/job_config.py, tag v0.2.2,
commit 73a0e69): [training] local_batch_size / global_batch_size / seq_len /
mixed_precision_param / mixed_precision_reduce, [training.dataloader], [optimizer]
implementation, [compile], [activation_checkpoint], [model] converters with
[quantize.linear.float8], [parallelism]. torchtitan accumulates gradients until
global_batch_size = local_batch_size x data-parallel degree x accumulation steps.
"""

from __future__ import annotations

from typing import Any

from autotuner.spec import Checkpointing, Kernels, Precision
from autotuner.study.export.facts import Facts

_FLOAT8_CONVERTER = "quantize.linear.float8"


def render(f: Facts) -> str:
    k = f.knobs
    notes: list[str] = []
    training: dict[str, Any] = {
        "local_batch_size": k.micro_batch_size,
        "global_batch_size": f.global_batch,
    }
    if f.seq_len:
        training["seq_len"] = f.seq_len
    if k.precision == Precision.FP16:
        notes.append("fp16: torchtitan mixes precision in bf16 or float32 only; bf16 is nearest")
    training["mixed_precision_param"] = "float32" if f.amp_dtype is None else "bfloat16"
    training["mixed_precision_reduce"] = "float32"
    if f.sharded and k.fsdp_reduce_dtype == "bf16":
        notes.append("fsdp_reduce_dtype=bf16: torchtitan reduces in float32 only")
    if f.tf32:
        notes.append('tf32: no config key; call torch.set_float32_matmul_precision("high")')
    sections: dict[str, dict[str, Any]] = {}
    if f.fp8_recipe:
        sections["model"] = {"converters": [_FLOAT8_CONVERTER]}
    sections["training"] = training
    dataloader: dict[str, Any] = {"num_workers": k.loader_workers, "pin_memory": k.pin_memory}
    if k.loader_workers > 0:
        dataloader["prefetch_factor"] = k.prefetch_factor
    sections["training.dataloader"] = dataloader
    sections["optimizer"] = {"implementation": "fused" if f.fused_adamw else "foreach"}
    if f.adamw_8bit:
        notes.append(
            "adamw-8bit: torchtitan's [optimizer] has no 8-bit moments; build "
            "torchao.optim.AdamW8bit in your optimizer builder (--format pytorch has the call)"
        )
    # torchtitan's "model" component compiles each transformer block on its own (regional
    # compilation), "loss" the loss function: block scope compiled the unfused loss as a region
    # of its own, and ran a fused kernels' loss eagerly.
    components = ["model"] if f.block_compile and f.kernels != Kernels.NONE else ["model", "loss"]
    sections["compile"] = {"enable": f.compile_mode is not None, "components": components}
    if f.block_compile:
        notes.append("compile_scope=block: torchtitan compiles each block on its own already")
    elif f.compile_mode:
        notes.append(
            "compile_scope=model: the trial compiled the whole model in one graph; torchtitan "
            "compiles each block on its own (compile_scope=block), and has no setting for one graph"
        )
    if f.kernels_label:
        notes.append(
            f"kernels={f.kernels.value}: torchtitan has no setting for {f.kernels_label}; "
            "apply them in your model (--format pytorch has the calls)"
        )
    if f.compile_mode not in (None, "default"):
        notes.append(
            f"compile mode {f.compile_mode!r}: torchtitan compiles with the default mode and has "
            "no setting for another"
        )
    ac: dict[str, Any] = {"mode": f.checkpointing.value}
    if f.checkpointing == Checkpointing.SELECTIVE:
        ac["selective_ac_option"] = "op"  # op-level SAC: what the trial ran
    sections["activation_checkpoint"] = ac
    if f.fp8_recipe:
        sections["quantize.linear.float8"] = {
            "recipe_name": f.fp8_recipe,
            "filter_fqns": ["output"],
        }
    if f.distributed:
        if f.sharded:
            sections["parallelism"] = {
                "data_parallel_replicate_degree": 1,
                "data_parallel_shard_degree": f.num_gpus,
                "fsdp_reshard_after_forward": "always" if f.reshard_after_forward else "never",
            }
        else:
            sections["parallelism"] = {
                "data_parallel_replicate_degree": f.num_gpus,
                "data_parallel_shard_degree": 1,
            }
            ddp = [n for n in ("ddp_grad_as_bucket_view", "ddp_static_graph") if getattr(k, n)]
            ddp += ["ddp_bucket_cap_mb"] if k.ddp_bucket_cap_mb != 25 else []
            ddp += ["grad_compression"] if k.grad_compression != "none" else []
            if ddp:
                notes.append(f"{', '.join(ddp)}: torchtitan's DDP has no setting for these")
    notes.append(
        f"attention {f.attention.value!r}: torchtitan picks attention by model flavor (SDPA, or "
        "flex in the *_flex_attn flavors); it has no key to pin one SDPA kernel"
    )
    if k.vocab_pad_multiple > 1:
        notes.append(
            f"vocab_pad_multiple={k.vocab_pad_multiple}: set the padded vocab_size in your "
            "model flavor's args (no job-config key)"
        )
    if not f.loader:
        notes.append("the trial read synthetic tokens: [training.dataloader] was not measured")
    if note := f.env_note:
        notes.append(note)
    lines = [
        *f.header(),
        "# torchtitan v0.2.2 job config fragment (TOML): merge these sections into your config.",
        *(f"# NOTE: {note}" for note in notes),
    ]
    for name, table in sections.items():
        lines += ["", f"[{name}]", *(f"{key} = {_toml(value)}" for key, value in table.items())]
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    """A TOML value for the types above (bool before int: bool is an int in Python)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")
