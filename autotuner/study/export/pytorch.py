"""A plain PyTorch snippet: the winning knobs as code around your own model and loop.

It defines `prepare(model, blocks)` (checkpointing per block, float8, DDP or FSDP2, fused
AdamW, torch.compile, in the order the trial applied them: workers/trial.py build_step) and
`train_step(model, optimizer, batches, device_type)` (autocast, the pinned attention kernel,
gradient accumulation with the collectives skipped on all but the last micro-step, loss
scaling for fp16, clipping). The model follows the factory contract (docs/models.md): it maps
token ids (B, T) to logits (B, T, vocab), and `next_token_loss` computes the mean
cross-entropy from them, as the trials do (workers/models/factory.py). With Liger's fused loss
the logits are never made whole: the model's forward takes the targets too and returns
`fused_loss(...)`, and `next_token_loss` passes them. `blocks` is the model's nn.ModuleList of
transformer blocks. Needs torch >= 2.6.
"""

from __future__ import annotations

from autotuner.spec import Attention, Checkpointing, Kernels
from autotuner.study.export.code import COMM_HOOK_IMPORT, COMM_HOOKS, py_literal
from autotuner.study.export.facts import Facts

_SDPA = {
    Attention.MATH: "MATH",
    Attention.EFFICIENT: "EFFICIENT_ATTENTION",
    Attention.FLASH: "FLASH_ATTENTION",
    Attention.CUDNN: "CUDNN_ATTENTION",
}

_CHECKPOINT = '''
class Checkpointed(torch.nn.Module):
    """One block under {mode} activation checkpointing (non-reentrant: composes with compile)."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, *args, **kwargs):
        return checkpoint(self.block, *args, use_reentrant=False, {context}**kwargs)
'''
# Selective: keep the matmul and attention outputs, recompute the cheap ops (torchtitan's
# op-level SAC; the policy the trial ran: workers/models/checkpointing.py).
_SELECTIVE = """
_SAVE = {
    getattr(torch.ops.aten, name).default
    for name in ("mm", "addmm", "bmm", "_scaled_mm", "_scaled_dot_product_flash_attention",
                 "_scaled_dot_product_flash_attention_for_cpu",
                 "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")
    if hasattr(torch.ops.aten, name)
}


def _policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in _SAVE else CheckpointPolicy.PREFER_RECOMPUTE


def _selective():
    return create_selective_checkpoint_contexts(_policy)
"""


# kernels=fused-ce / liger: the output layer and the loss in Liger's fused kernel, called from
# the model's forward (Liger keeps the logits chunk by chunk: the loss needs the hidden states
# and the output layer, not logits). Imported when called: Liger needs CUDA and Triton.
_FUSED_LOSS = '''
def fused_loss(output_layer, hidden, targets):
    """Mean next-token loss through Liger's fused linear cross-entropy: call it in your model's
    forward in place of F.cross_entropy(output_layer(hidden).float(), targets)."""
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

    loss = LigerFusedLinearCrossEntropyLoss()
    flat = hidden.reshape(-1, hidden.size(-1))
    return loss(output_layer.weight, flat, targets.reshape(-1), output_layer.bias)
'''

# kernels=cce: the output layer and the loss in cut-cross-entropy's kernels (no logits at all).
# Its Triton kernels do not see autocast: the input and the weight are cast to the autocast
# dtype as the trials cast them (workers/models/kernels.py); its backward takes half inputs.
_CCE_LOSS = '''
def fused_loss(output_layer, hidden, targets):
    """Mean next-token loss through cut-cross-entropy: call it in your model's forward in
    place of F.cross_entropy(output_layer(hidden).float(), targets)."""
    from cut_cross_entropy import linear_cross_entropy

    hidden, weight = hidden.reshape(-1, hidden.size(-1)), output_layer.weight
    if torch.is_autocast_enabled(hidden.device.type):
        dtype = torch.get_autocast_dtype(hidden.device.type)
        hidden, weight = hidden.to(dtype), weight.to(dtype)
    return linear_cross_entropy(hidden, weight, targets.reshape(-1), impl="cce")
'''

# The loss as the trials compute it for a model that maps token ids to logits (the factory
# contract): cross-entropy over the logits in fp32, whatever the autocast dtype.
_LOSS = '''
def next_token_loss(model, x, y):
    """Mean next-token cross-entropy of `model`, which maps token ids (B, T) to logits."""
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))
'''
# Under compile_scope block the trials compile the output layer with the loss as a region of
# its own (workers/compiling.py): here, the loss over the model's logits, compiled on its own.
_LOSS_COMPILED = '''
@torch.compile(mode={mode!r})
def logits_loss(logits, y):
    """Cross-entropy over the logits in fp32, compiled: the fp32 copy is never made whole."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))


def next_token_loss(model, x, y):
    """Mean next-token cross-entropy of `model`, which maps token ids (B, T) to logits."""
    return logits_loss(model(x), y)
'''
_LOSS_FUSED = '''
def next_token_loss(model, x, y):
    """Mean next-token loss from the model's forward, which calls fused_loss (above)."""
    return model(x, y)
'''


def render(f: Facts) -> str:
    k = f.knobs
    imports = ["import contextlib", "", "import torch"]
    body: list[str] = []
    notes: list[str] = []
    # ------------------------------------------------------------- constants
    amp = {None: "None", "bfloat16": "torch.bfloat16", "float16": "torch.float16"}[f.amp_dtype]
    matmul = "high" if f.tf32 or (f.amp_dtype and f.device_type == "cuda") else "highest"
    loader = {
        "batch_size": k.micro_batch_size,
        "num_workers": k.loader_workers,
        "pin_memory": k.pin_memory,
    }
    if k.loader_workers > 0:
        loader["prefetch_factor"] = k.prefetch_factor
    consts = [
        f"GRAD_ACCUM = {k.grad_accum}",
        f"AMP_DTYPE = {amp}",
        "GRAD_CLIP = 1.0",
        f"DATALOADER_KWARGS = {py_literal(loader)}  # torch.utils.data.DataLoader(dataset, ...)",
        f'torch.set_float32_matmul_precision("{matmul}")',
    ]
    # ------------------------------------------------------------- checkpointing
    if f.checkpointing != Checkpointing.NONE:
        imports.append("from torch.utils.checkpoint import checkpoint")
        context = ""
        if f.checkpointing == Checkpointing.SELECTIVE:
            imports.append(
                "from torch.utils.checkpoint import CheckpointPolicy, "
                "create_selective_checkpoint_contexts"
            )
            body.append(_SELECTIVE.strip("\n"))
            context = "context_fn=_selective, "
        body.append(_CHECKPOINT.format(mode=f.checkpointing.value, context=context).strip("\n"))
    # ------------------------------------------------------------- prepare()
    prep = [
        "def prepare(model, blocks):",
        '    """Apply the measured knobs; returns (the model to call, its optimizer)."""',
    ]
    if f.checkpointing != Checkpointing.NONE:
        prep += ["    for i in range(len(blocks)):", "        blocks[i] = Checkpointed(blocks[i])"]
    if f.fp8_recipe:
        imports.append("from torchao.float8 import Float8LinearConfig, convert_to_float8_training")
        prep += [
            "    # float8 matmuls (torchao), not in the output layer; dims must be multiples of 16",
            f'    fp8 = Float8LinearConfig.from_recipe_name("{f.fp8_recipe}")',
            "    convert_to_float8_training(model, config=fp8, module_filter_fn=lambda m, fqn: (",
            '        fqn not in ("output", "lm_head") and m.in_features % 16 == 0',
            "        and m.out_features % 16 == 0))",
        ]
    if f.adamw_8bit:
        imports.append("from torchao.optim import AdamW8bit  # 8-bit moments, fp32 update math")
    compile_call = f"torch.compile({{}}, mode={f.compile_mode!r})" if f.compile_mode else "{}"
    if f.kernels != Kernels.NONE:
        cce = f.kernels == Kernels.CCE
        body.append((_CCE_LOSS if cce else _FUSED_LOSS).strip("\n"))
        body.append(_LOSS_FUSED.strip("\n"))
        package = "cut-cross-entropy" if cce else "liger-kernel"
        notes.append(
            f"kernels={f.kernels.value}: your model's forward(ids, targets) returns "
            f"fused_loss(output_layer, hidden, targets) ({package}, CUDA only)"
        )
    else:
        imports.append("import torch.nn.functional as F")
        if f.block_compile:
            body.append(_LOSS_COMPILED.format(mode=f.compile_mode).strip("\n"))
        else:
            body.append(_LOSS.strip("\n"))
    if f.kernels == Kernels.LIGER:
        notes.append(
            "kernels=liger: also swap the blocks' norms for liger_kernel.transformers.LigerRMSNorm "
            "(LigerLayerNorm), their SwiGLU for liger_kernel.ops.swiglu.LigerSiLUMulFunction and "
            "their RoPE for liger_kernel.transformers.liger_rotary_pos_emb; a Hugging Face model: "
            "liger_kernel.transformers._apply_liger_kernel_to_instance(model=model)"
        )
    sync = "contextlib.nullcontext()"
    if f.sharded:
        imports.append("from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard")
        param = "torch.bfloat16" if f.amp_dtype == "bfloat16" else "torch.float32"
        reduce = "torch.bfloat16" if k.fsdp_reduce_dtype == "bf16" else "torch.float32"
        reshard = f.reshard_after_forward
        prep += [
            "    # FSDP2: compile each block, shard it, then shard the root (torchtitan's order)",
            f"    mp = MixedPrecisionPolicy(param_dtype={param}, reduce_dtype={reduce})",
            "    for i in range(len(blocks)):",
            f"        blocks[i] = {compile_call.format('blocks[i]')}",
            f"        fully_shard(blocks[i], mp_policy=mp, reshard_after_forward={reshard})",
            f"    fully_shard(model, mp_policy=mp, reshard_after_forward={reshard})",
            f"    optimizer = {_adamw(f)}",
            "    return model, optimizer",
        ]
        sync = "model.set_requires_gradient_sync(last) or contextlib.nullcontext()"
    else:
        prep.append(f"    optimizer = {_adamw(f)}")
        if f.distributed:
            imports.append("from torch.nn.parallel import DistributedDataParallel as DDP")
            prep += [
                "    device = next(model.parameters()).device",
                "    model = DDP(",
                "        model,",
                '        device_ids=[device.index] if device.type == "cuda" else None,',
                f"        bucket_cap_mb={k.ddp_bucket_cap_mb},",
                f"        gradient_as_bucket_view={k.ddp_grad_as_bucket_view},",
                f"        static_graph={k.ddp_static_graph},",
                "    )",
            ]
            if k.grad_compression in COMM_HOOKS:
                imports.append(COMM_HOOK_IMPORT)
                hook, state = COMM_HOOKS[k.grad_compression]
                prep.append(f"    model.register_comm_hook({state}, {hook})")
            sync = "contextlib.nullcontext() if last else model.no_sync()"
        if f.block_compile:
            # Regional compilation: one graph per block, reused by every layer; the loss is
            # compiled on its own (logits_loss), the embedding stays eager, as measured.
            prep += [
                "    for block in blocks:",
                f"        block.compile(mode={f.compile_mode!r})",
                "    return model, optimizer",
            ]
        else:
            prep.append(f"    return {compile_call.format('model')}, optimizer")
    body.append("\n".join(prep))
    # ------------------------------------------------------------- train_step()
    if f.attention == Attention.FLEX:
        kernel = "contextlib.nullcontext()"
        notes.append(
            "attention 'flex': call torch.nn.attention.flex_attention.flex_attention with a "
            "causal block mask in your attention module (compiled); SDPA is not used"
        )
    else:
        imports.append("from torch.nn.attention import SDPBackend, sdpa_kernel")
        kernel = f"sdpa_kernel(SDPBackend.{_SDPA[f.attention]})"
    scaler = f.amp_dtype == "float16"
    step = [
        "def train_step(model, optimizer, batches, device_type, scaler=None):",
        '    """One optimizer step over GRAD_ACCUM micro-batches; returns the mean loss."""',
        "    total = 0.0",
        "    for i in range(GRAD_ACCUM):",
        "        x, y = next(batches)",
        "        last = i == GRAD_ACCUM - 1",
        # The kernel is pinned over the backward too: checkpointed blocks recompute their
        # forward there, and one that chose another SDPA kernel saves other tensors
        # (torch's CheckpointError "Recomputed values ... have different metadata").
        f"        with {sync}, {kernel}:",
        "            with torch.autocast(",
        "                device_type, dtype=AMP_DTYPE, enabled=AMP_DTYPE is not None",
        "            ):",
        "                loss = next_token_loss(model, x, y) / GRAD_ACCUM",
        "            (scaler.scale(loss) if scaler else loss).backward()",
        "        total += loss.detach()",
        "    if scaler:",
        "        scaler.unscale_(optimizer)",
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)",
        "    if scaler:",
        "        scaler.step(optimizer)",
        "        scaler.update()",
        "    else:",
        "        optimizer.step()",
        "    optimizer.zero_grad(set_to_none=True)",
        "    return total",
    ]
    body.append("\n".join(step))
    if scaler:
        notes.append("fp16: pass scaler=torch.amp.GradScaler(device_type) to train_step")
    if k.vocab_pad_multiple > 1:
        notes.append(
            f"vocab_pad_multiple={k.vocab_pad_multiple}: build the embedding and output layer "
            f"with the vocab rounded up to a multiple of {k.vocab_pad_multiple}"
        )
    if not f.loader:
        notes.append("the trial read synthetic tokens: DATALOADER_KWARGS were not measured")
    if f.distributed:
        notes.append(
            f"launch with torchrun --nproc-per-node {f.num_gpus} after "
            "torch.distributed.init_process_group()"
        )
    if note := f.env_note:
        notes.append(note)
    lines = [
        *f.header(),
        "# Plain PyTorch: prepare(model, blocks) once, then train_step(...) per optimizer step.",
        *(f"# NOTE: {note}" for note in notes),
        *imports,
        "",
        *consts,
    ]
    return "\n".join(lines) + "\n\n\n" + "\n\n\n".join(body) + "\n"


def _adamw(f: Facts) -> str:
    if f.adamw_8bit:
        return "AdamW8bit(model.parameters(), lr=3e-4, betas=(0.9, 0.95))"
    impl = "fused=True" if f.fused_adamw else "foreach=True"
    return f"torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), {impl})"
