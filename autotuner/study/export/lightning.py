"""Lightning `Trainer` keyword arguments (precision, accumulation, devices, strategy) and the
DataLoader's, as a Python snippet for lightning >= 2.4.

The Trainer owns precision, accumulation and the data-parallel strategy; the model-side knobs
(torch.compile, checkpointing, attention kernel, float8, fused AdamW) belong in the
LightningModule (configure_model / configure_optimizers), where the plain PyTorch export's code
applies as it is.
"""

from __future__ import annotations

from autotuner.spec import Checkpointing, Kernels, Precision
from autotuner.study.export.code import COMM_HOOK_IMPORT, COMM_HOOKS, call_kwargs
from autotuner.study.export.facts import Facts

# Lightning's precision strings. fp8 trials ran bf16 autocast around torchao Float8Linear layers:
# the Trainer side of that is bf16-mixed (Lightning's "transformer-engine" is another library).
_PRECISION = {
    Precision.FP32: "32-true",
    Precision.TF32: "32-true",
    Precision.FP16: "16-mixed",
    Precision.BF16: "bf16-mixed",
    Precision.FP8_TENSORWISE: "bf16-mixed",
    Precision.FP8_ROWWISE: "bf16-mixed",
}


def render(f: Facts) -> str:
    k = f.knobs
    imports = ["import torch"]
    setup: list[str] = []
    notes: list[str] = []
    if f.tf32:
        setup.append('torch.set_float32_matmul_precision("high")  # tf32 matmuls')
    trainer = {
        "accelerator": repr("gpu" if f.device_type == "cuda" else "cpu"),
        "devices": str(f.num_gpus),
        "precision": repr(_PRECISION[k.precision]),
        "accumulate_grad_batches": str(k.grad_accum),
    }
    if f.distributed and not f.sharded:
        imports.append("from lightning.pytorch.strategies import DDPStrategy")
        ddp = [
            f"bucket_cap_mb={k.ddp_bucket_cap_mb}",
            f"gradient_as_bucket_view={k.ddp_grad_as_bucket_view}",
            f"static_graph={k.ddp_static_graph}",
        ]
        if k.grad_compression in COMM_HOOKS:
            imports.append(COMM_HOOK_IMPORT)
            hook, state = COMM_HOOKS[k.grad_compression]
            ddp.append(f"ddp_comm_hook={hook}")
            if state != "None":
                ddp.append(f"ddp_comm_state={state}")
        trainer["strategy"] = f"DDPStrategy({', '.join(ddp)})"
    elif f.sharded:
        # FSDP2 (fully_shard) is Lightning's ModelParallelStrategy; the sharding itself is
        # applied by the module, per block then the root, in configure_model.
        imports.append("from lightning.pytorch.strategies import ModelParallelStrategy")
        trainer["strategy"] = (
            f"ModelParallelStrategy(data_parallel_size={f.num_gpus}, tensor_parallel_size=1)"
        )
        reduce = "torch.bfloat16" if k.fsdp_reduce_dtype == "bf16" else "torch.float32"
        param = "torch.bfloat16" if f.amp_dtype == "bfloat16" else "torch.float32"
        notes.append(
            "in configure_model: for each block, then the whole model: fully_shard(module, "
            f"mesh=self.device_mesh['data_parallel'], mp_policy=MixedPrecisionPolicy("
            f"param_dtype={param}, reduce_dtype={reduce}), reshard_after_forward="
            f"{f.reshard_after_forward})"
        )
    loader = {"batch_size": str(k.micro_batch_size), "num_workers": str(k.loader_workers)}
    loader["pin_memory"] = str(k.pin_memory)
    if k.loader_workers > 0:
        loader["prefetch_factor"] = str(k.prefetch_factor)
    model_side = []
    if f.block_compile:
        model_side.append(f"block.compile(mode={f.compile_mode!r}) for each transformer block")
        if f.kernels == Kernels.NONE:
            model_side.append("torch.compile of the loss over the logits (training_step)")
    elif f.compile_mode:
        model_side.append(f"torch.compile(mode={f.compile_mode!r})")
    if f.kernels_label:
        model_side.append(f.kernels_label)
    if f.checkpointing != Checkpointing.NONE:
        model_side.append(f"{f.checkpointing.value} activation checkpointing per block")
    if f.fp8_recipe:
        model_side.append(f"torchao float8 ({f.fp8_recipe}) Linear layers")
    model_side.append(f"the {f.attention.value!r} attention kernel")
    model_side.append(
        "torchao.optim.AdamW8bit"
        if f.adamw_8bit
        else f"AdamW({'fused' if f.fused_adamw else 'foreach'}=True)"
    )
    notes.append(
        "the model-side knobs go in your LightningModule (configure_model, "
        "configure_optimizers): " + ", ".join(model_side) + "; --format pytorch has the code"
    )
    if k.vocab_pad_multiple > 1:
        notes.append(
            f"vocab_pad_multiple={k.vocab_pad_multiple}: pad the embedding/output rows to a "
            "multiple of it when you build the model (no Trainer setting)"
        )
    if not f.loader:
        notes.append("the trial read synthetic tokens: the DataLoader settings were not measured")
    if note := f.env_note:
        notes.append(note)
    lines = [
        *f.header(),
        "# Lightning: Trainer and DataLoader keyword arguments.",
        *(f"# NOTE: {note}" for note in notes),
        *imports,
        *setup,
        call_kwargs("trainer_kwargs", trainer),
        call_kwargs("dataloader_kwargs", loader),
        "# trainer = lightning.Trainer(**trainer_kwargs)",
        "# loader = torch.utils.data.DataLoader(dataset, shuffle=True, **dataloader_kwargs)",
    ]
    return "\n".join(lines) + "\n"
