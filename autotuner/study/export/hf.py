"""Hugging Face `transformers.TrainingArguments` keyword arguments, as a Python snippet.

The snippet defines two dicts: `training_args_kwargs` for `TrainingArguments(output_dir=...,
**training_args_kwargs)` and `model_kwargs` for `AutoModelForCausalLM.from_pretrained(name,
**model_kwargs)`. Written for transformers >= 4.46 (torch_compile_mode, dataloader_prefetch_factor,
gradient_checkpointing_kwargs); tested against the installed version.
"""

from __future__ import annotations

from typing import Any

from autotuner.spec import Attention, Checkpointing, Kernels
from autotuner.study.export.code import py_literal
from autotuner.study.export.facts import Facts

# The model's attention implementation for each backend the trial pinned. HF's "sdpa" calls
# torch's scaled_dot_product_attention and lets torch choose the kernel; "eager" is the
# materialised-scores computation that SDPA's math backend also runs.
_ATTN_IMPLEMENTATION = {
    Attention.MATH: "eager",
    Attention.EFFICIENT: "sdpa",
    Attention.FLASH: "sdpa",
    Attention.CUDNN: "sdpa",
    Attention.FLEX: "flex_attention",
}
# kernels=fused-ce: Liger's fused linear cross-entropy alone (the Trainer's liger_kernel_config
# is passed to Liger's apply function for the model's type, whose other kernels default on).
_FUSED_CE_ONLY = {
    "rope": False,
    "rms_norm": False,
    "swiglu": False,
    "cross_entropy": False,
    "fused_linear_cross_entropy": True,
}
_SDPA_BACKEND = {
    Attention.EFFICIENT: "EFFICIENT_ATTENTION",
    Attention.FLASH: "FLASH_ATTENTION",
    Attention.CUDNN: "CUDNN_ATTENTION",
}


def render(f: Facts) -> str:
    k = f.knobs
    kwargs: dict[str, Any] = {
        "per_device_train_batch_size": k.micro_batch_size,
        "gradient_accumulation_steps": k.grad_accum,
        "bf16": f.amp_dtype == "bfloat16",
        "fp16": f.amp_dtype == "float16",
    }
    notes: list[str] = []
    if f.device_type == "cpu":
        # Measured on the CPU: the Trainer must run there too. Without use_cpu, TrainingArguments
        # refuses bf16 on a machine with no GPU ("Your setup doesn't support bf16/gpu").
        kwargs["use_cpu"] = True
    if f.tf32 and f.device_type == "cpu":
        # TF32 is a GPU matmul mode: TrainingArguments refuses tf32=True without an Ampere GPU.
        notes.append("tf32 is a GPU mode: left out for a study measured on the CPU")
    elif f.tf32:
        kwargs["tf32"] = True
    if f.block_compile:
        # torch_compile would compile the whole model, which is not what was measured.
        notes.append(
            "compile_scope=block: TrainingArguments compiles the whole model (torch_compile) "
            "and has no per-block setting; compile each decoder layer before building the "
            f"Trainer: for layer in model.model.layers: layer.compile(mode={f.compile_mode!r})"
            + (
                "; the trial compiled the output layer with the loss too (override "
                "Trainer.compute_loss with a torch.compile'd cross-entropy over the logits)"
                if f.kernels == Kernels.NONE
                else ""
            )
        )
    elif f.compile_mode:
        kwargs["torch_compile"] = True
        kwargs["torch_compile_mode"] = f.compile_mode
    if f.kernels == Kernels.CCE:
        notes.append(
            "kernels=cce: TrainingArguments has no setting for cut-cross-entropy; `pip install "
            "cut-cross-entropy` (CUDA only) and override Trainer.compute_loss to return "
            "cut_cross_entropy.linear_cross_entropy(hidden.to(torch.bfloat16), "
            "model.get_output_embeddings().weight.to(torch.bfloat16), labels, shift=True) with "
            "hidden = model.model(input_ids=inputs['input_ids']).last_hidden_state, so the "
            "logits are never built"
        )
    elif f.kernels != Kernels.NONE:
        kwargs["use_liger_kernel"] = True
        if f.kernels == Kernels.FUSED_CE:
            kwargs["liger_kernel_config"] = dict(_FUSED_CE_ONLY)
        notes.append(
            "use_liger_kernel needs `pip install liger-kernel` and a CUDA GPU, and patches the "
            "model types Liger covers (llama, mistral, qwen2/3, gemma, phi3, ...)"
            + (
                "; liger_kernel_config is a TrainingArguments field of recent transformers "
                "(5.x has it): on one without it, call liger_kernel.transformers."
                "_apply_liger_kernel_to_instance(model=model, rope=False, rms_norm=False, "
                "swiglu=False) yourself instead"
                if f.kernels == Kernels.FUSED_CE
                else ""
            )
        )
    if f.checkpointing != Checkpointing.NONE:
        kwargs["gradient_checkpointing"] = True
        kwargs["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
        # The 4.x name, which 5.x still takes (with a FutureWarning): the export's floor is 4.46.
        notes.append(
            "transformers 5.x names gradient_checkpointing(_kwargs) activation_checkpointing"
            "(_kwargs) and drops the old names in 6.0: rename them there"
        )
    if f.checkpointing == Checkpointing.SELECTIVE:
        notes.append(
            "checkpointing 'selective' (keep matmul/attention outputs, recompute the rest) has "
            "no TrainingArguments setting: gradient_checkpointing recomputes whole layers, "
            "which uses less memory and more time than what was measured"
        )
    # adamw_torch_8bit is torchao's AdamW8bit, what the trial ran (adamw_8bit is bitsandbytes').
    kwargs["optim"] = (
        "adamw_torch_8bit"
        if f.adamw_8bit
        else "adamw_torch_fused"
        if f.fused_adamw
        else "adamw_torch"
    )
    kwargs["dataloader_num_workers"] = k.loader_workers
    kwargs["dataloader_pin_memory"] = k.pin_memory
    if k.loader_workers > 0:
        kwargs["dataloader_prefetch_factor"] = k.prefetch_factor
    if not f.loader:
        notes.append(
            "the trial read synthetic tokens: the dataloader settings are the space's values, "
            "not measured ones"
        )
    if f.distributed and not f.sharded:
        kwargs["ddp_bucket_cap_mb"] = k.ddp_bucket_cap_mb
        kwargs["ddp_find_unused_parameters"] = False
        for knob in ("ddp_grad_as_bucket_view", "ddp_static_graph"):
            if getattr(k, knob):
                notes.append(f"{knob}=True has no TrainingArguments setting")
        if k.grad_compression != "none":
            notes.append(
                f"grad_compression={k.grad_compression}: register the DDP comm hook yourself "
                "(see --format pytorch); TrainingArguments has no setting for it"
            )
    if f.sharded:
        kwargs["fsdp"] = "full_shard auto_wrap" if f.reshard_after_forward else "shard_grad_op"
        kwargs["fsdp_config"] = {"version": 2, "reshard_after_forward": f.reshard_after_forward}
        if k.fsdp_reduce_dtype == "bf16":
            notes.append("fsdp_reduce_dtype=bf16 has no TrainingArguments setting")
    if f.fp8_recipe:
        notes.append(
            f"{k.precision.value}: TrainingArguments has no float8 setting; bf16 is set, convert "
            f"the Linear layers with torchao (convert_to_float8_training, recipe "
            f"{f.fp8_recipe!r}) or use an Accelerate fp8 config (--format accelerate)"
        )
    if k.vocab_pad_multiple > 1:
        notes.append(
            f"vocab_pad_multiple={k.vocab_pad_multiple}: after loading, call "
            f"model.resize_token_embeddings(len(tokenizer), "
            f"pad_to_multiple_of={k.vocab_pad_multiple})"
        )
    if note := f.env_note:
        notes.append(note)
    model_kwargs = {"attn_implementation": _ATTN_IMPLEMENTATION[f.attention]}
    if f.attention in _SDPA_BACKEND:
        notes.append(
            f"attention {f.attention.value!r} is one SDPA kernel; 'sdpa' lets torch choose. To "
            f"pin it, train inside torch.nn.attention.sdpa_kernel("
            f"SDPBackend.{_SDPA_BACKEND[f.attention]})"
            + (
                " (or use 'flash_attention_2' with the flash-attn package)"
                if f.attention == Attention.FLASH
                else ""
            )
        )
    lines = [
        *f.header(),
        "# Hugging Face transformers: TrainingArguments and from_pretrained keyword arguments.",
        *(f"# NOTE: {note}" for note in notes),
        f"training_args_kwargs = {py_literal(kwargs)}",
        f"model_kwargs = {py_literal(model_kwargs)}",
        "# model = AutoModelForCausalLM.from_pretrained(NAME, **model_kwargs)",
        '# args = TrainingArguments(output_dir="out", **training_args_kwargs)',
    ]
    return "\n".join(lines) + "\n"
