"""Throughput model: a trial's tokens/s before it runs, from the model's shapes and the hardware.

The time one GPU spends per token is a sum of physical terms, each an honest first estimate at
the hardware's nominal rates, with one efficiency multiplier per term fitted online to the
study's own trials (`regression.fit_relative`: shrunk toward the physics, relative errors,
robust). Terms, in seconds per token per GPU:

| term                  | what it counts                                                        |
| mm_half/fp8/tf32/fp32 | matmul FLOPs (6 per parameter per token, 8 for a recomputed block) at |
|                       | the precision's dense rate; fp8 leaves the LM head in bf16            |
| mm_head_unaligned     | the LM head when the vocab is not a multiple of 64 (ragged tiles)     |
| attn_flash/cudnn/     | causal attention FLOPs (half of PaLM's 12 L d T) at the kernel's rate;|
| efficient/flex        | one term per kernel: each is its own implementation                   |
| attn_math             | the math backend: the full score FLOPs plus its fp32 T x T traffic    |
| elementwise_eager /   | bytes that norms, activations, residuals and the fp32 loss move at    |
| elementwise_compiled  | HBM bandwidth (inductor fuses them: its own multiplier); under block  |
|                       | scope the loss is eager                                               |
| scope_block           | compile_scope=block's seams: each block's output and its gradient     |
|                       | written and read between graphs (no fusion across them), and each     |
|                       | block's compiled call (guards) forward and backward                   |
| loss_fused            | Liger's fused linear cross-entropy (kernels fused-ce, liger) in place |
|                       | of the fp32 loss: its logits chunks' bytes, the input gradient, each  |
|                       | chunk's launches and the host sync it makes per micro-step            |
| loss_cce              | cut-cross-entropy's loss (kernels cce): the output layer's matmuls in |
|                       | its Triton kernels (taken out of the mm terms), with the forward's    |
|                       | logits recomputed in backward (8 FLOPs per weight where cuBLAS's are  |
|                       | 6), its launches and the host sync of its target check                |
| kernels_liger         | kernels=liger: the norms', SwiGLU's and RoPE's bytes in Liger's       |
|                       | kernels (one pass each), taken out of the elementwise terms          |
| launch_eager/compiled | kernel launches per micro-step (CPU-bound), shared by its tokens;     |
|                       | eager float8 adds its casts' launches                                 |
| /graphs               | (CUDA graphs replay the step: almost none)                            |
| optimizer_fused /     | AdamW's bytes per parameter per optimizer step at HBM bandwidth,      |
| optimizer_foreach     | shared by the step's tokens                                           |
| optimizer_8bit        | the same for 8-bit moments (half the bytes), plus one compiled call   |
|                       | per parameter tensor (torchao steps them one by one, from Python)     |
| weights_micro_step    | what each micro-step moves per weight, whatever its tokens: the      |
|                       | autocast half copy and its gradient's cast back, and with            |
|                       | accumulation the sum into the kept gradients (big model, small       |
|                       | micro-batch: Llama 8B at 1 x 8 ran 9.5% under 8 x 1 with recompute)   |
| fp8_cast              | float8's casts: weights per micro-step, activations per token        |
| fp8_rowwise           | rowwise scaling's work beyond tensorwise's, in proportion to all the  |
|                       | float8 work (its matmuls, casts and eager launches)                   |
| comm                  | gradient/parameter traffic between ranks, per optimizer step          |

Only terms a study varies can be learned; the rest keep the prior's value and its uncertainty,
which is what makes an untried precision or compile mode worth exploring: the prediction's
standard deviation carries it (`ThroughputModel.predict`). On a CPU the nominal rates are
placeholders and the priors are wide: the fit does the work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from autotuner.executors.base import Target
from autotuner.flops import MATMUL_RATE_VS_BF16, hbm_bandwidth_for, mlp_params, peak_flops_for
from autotuner.search.costmodel.memory import (
    block_activation_bytes,
    mlp_width_per_token,
    padded_vocab,
)
from autotuner.search.costmodel.regression import fit_relative
from autotuner.spec import (
    Attention,
    Checkpointing,
    CompileMode,
    CompileScope,
    Kernels,
    Knobs,
    ModelFamily,
    ModelSpec,
    Optimizer,
    Precision,
    TrialResult,
)

TERMS = (
    "mm_half",
    "mm_fp8",
    "mm_tf32",
    "mm_fp32",
    "mm_head_unaligned",
    "attn_flash",
    "attn_cudnn",
    "attn_efficient",
    "attn_flex",
    "attn_math",
    "elementwise_eager",
    "elementwise_compiled",
    "scope_block",
    "loss_fused",
    "loss_cce",
    "kernels_liger",
    "launch_eager",
    "launch_compiled",
    "launch_graphs",
    "optimizer_fused",
    "optimizer_foreach",
    "optimizer_8bit",
    "weights_micro_step",
    "fp8_cast",
    "fp8_rowwise",
    "comm",
)
# Prior multipliers (1 / efficiency against the nominal rate) and their relative sd: what a
# well-tuned H100/H200 reaches (matmuls ~60% of peak, fused attention ~50%, memory-bound work
# ~70% of HBM bandwidth), loose enough that a handful of trials overrules them.
PRIOR_MULTIPLIER = {
    "mm_half": 1.6,
    "mm_fp8": 2.2,
    "mm_tf32": 1.6,
    "mm_fp32": 1.3,
    "mm_head_unaligned": 3.0,
    # One term per fused kernel: they share the FLOPs, not the code. With one term for all four,
    # leave-one-out on the H200 landscapes predicted the memory-efficient kernel 7-16% too
    # fast on all three and could not carry "cuDNN beats flash" from one config to the next.
    # The memory-efficient kernel (CUTLASS, written for sm80) runs at about half flash's rate
    # on the H200: its prior is fitted to the three landscapes (bench/throughput_loo.py).
    # cuDNN's is lower on Hopper and newer (HOPPER_PRIOR below).
    "attn_flash": 2.0,
    "attn_cudnn": 2.0,
    "attn_efficient": 4.0,
    "attn_flex": 2.0,
    "attn_math": 1.5,
    "elementwise_eager": 1.5,
    "elementwise_compiled": 0.6,
    # Not yet fitted on a GPU: their physics at the memory-bound terms' efficiency, with the
    # prior's width. Block scope's seams (its output region compiled too) cost 0.6-1.0% of
    # a step on three HF models on the H100 (bench/results/hf_knobs_h100). Liger's kernels
    # make one pass over their bytes where eager ops make several (eager's 1.5 already counts
    # the extra passes), and are opaque to inductor, which would have fused them into the
    # neighbouring matmuls' epilogues (compiled's 0.6).
    "scope_block": 1.5,
    "loss_fused": 1.5,
    # Not yet fitted: Triton matmuls with on-chip reductions and locked accumulation of the
    # gradients, below cuBLAS's efficiency (mm_half 1.6); the gradient filter skips some of
    # backward's blocks, which the fit takes in.
    "loss_cce": 2.0,
    "kernels_liger": 1.0,
    "launch_eager": 1.0,
    "launch_compiled": 1.0,
    "launch_graphs": 1.0,
    "optimizer_fused": 1.5,
    "optimizer_foreach": 2.5,
    "optimizer_8bit": 1.5,  # not yet fitted on a GPU: PRIOR_REL_SD's width carries it
    "weights_micro_step": 1.5,  # memory-bound, as the optimizer's
    "fp8_cast": 1.5,
    # Rowwise scaling keeps one scale per row of each operand, for the operand and for its
    # transpose in backward (amax along both axes), and its scaled matmul applies them in the
    # epilogue: extra work in proportion to float8's own. Without the term the model priced
    # both alike, so its leave-one-out errors on the H200 landscapes leaned one way for each:
    # tensorwise under-predicted by up to 24%, rowwise over-predicted by up to 60%. Fitted to
    # them (1B, 3B, GPT-2: 0.6-1.1 with 1-10 rowwise configs each).
    "fp8_rowwise": 0.7,
    "comm": 0.5,  # mostly overlapped with backward
}
# Compute capability 9.0 and newer: cuDNN's attention kernels use Hopper's tensor-memory
# accelerator and warpgroup matmuls, which SDPA's flash backend (FlashAttention-2) does not. On
# the H200 cuDNN beat flash in 13 of 14 configs measured both ways (2-6% of the whole step, the
# one loss GPT-2 at micro-batch 4), so a study's first proposals try it before it has measured
# it. With flash's prior in its place the Llama 1B replay at 32,768 tokens needs more trials to
# reach fp8 with cuDNN, the best (bench/results/replay_llama_h200.md).
HOPPER_PRIOR = {"attn_cudnn": 1.5}
PRIOR_REL_SD_GPU = 0.5
PRIOR_REL_SD_CPU = 2.0  # nominal CPU rates are placeholders
MIN_REL_SD = 0.03  # never claims better than 3%: about the run-to-run noise of a short trial

# Nominal rates where the device is unknown (the CPU): only their ratios matter after a fit.
CPU_FLOPS = 5e11
CPU_BYTES_PER_S = 5e10
LINK_BYTES_PER_S = 4.5e11  # NVLink 4 per direction; PCIe-only hosts fit a larger multiplier
LAUNCH_S = 1.5e-5  # one eager op from Python through autograd to the launch (2024-era host)
# Kernels one block launches per micro-step, forward and backward (eager: every op; compiled:
# inductor's fused kernels; CUDA graphs: one replay), plus the embedding, head and loss.
KERNELS_PER_BLOCK = {"eager": 75, "compiled": 14, "graphs": 0}
KERNELS_FIXED = {"eager": 60, "compiled": 20, "graphs": 3}
# Eager float8 (torchao tensor subclasses) costs about 100 launches per linear per micro-step in
# Python dispatch (fitted to the H200 GPT-2 recording: eager fp8 ran at 1/3 of eager bf16).
FP8_KERNELS_PER_LINEAR = {"eager": 100, "compiled": 2, "graphs": 0}
ADAMW_BYTES_PER_PARAM = 32  # read param, grad, two moments (fp32); write param and moments
# The same with 8-bit moments and their fp32 scale per 256 values.
ADAMW_8BIT_BYTES_PER_PARAM = 12 + 2 * Optimizer.ADAMW_8BIT.state_bytes_per_param
# torchao's AdamW8bit calls its compiled update once per parameter tensor from Python: dynamo's
# guards on the tensor-subclass arguments, the call and its kernel's launch. Measured on the H200
# machine's host (bench/results/h200_session_20261205, `bench/optimizer_step.py --preset
# llama-1b`): 276 us for a 16-value tensor, about 390 us a tensor at Llama 1B once its bytes are
# taken out (the 2-core CPU machine: 215 us a call, bench/results/optimizer_step_cpu.md).
ADAMW_8BIT_CALL_S = 3.9e-4
FP8_WEIGHT_CAST_BYTES = 7  # read fp32 weight, amax pass, write fp8 (per micro-step)
# compile_scope=block: a compiled block's call from the eager loop, forward and backward
# (dynamo's guards on the block's inputs and the compiled function's dispatch).
BLOCK_CALL_S = 3e-5
# Liger's fused linear cross-entropy per chunk of rows: the logits matmul, the loss-and-gradient
# kernel, the input's and the weight's gradient matmuls and a cast (ops/fused_linear_
# cross_entropy.py); and the host sync of its `.item()` (the count of rows that carry a target),
# once a micro-step: the launch queue drains there.
FUSED_CE_KERNELS_PER_CHUNK = 5
# cut-cross-entropy's launches per micro-step (cut_cross_entropy/cce.py): the target check
# (a nonzero, which syncs the host), the log-sum-exp and indexed-dot kernels, the loss's sum and
# mean, the compiled sort of the vocabulary, the backward kernel and the gradients' casts.
CCE_KERNELS = 10
HOST_SYNC_S = 5e-5
# Kernel launches Liger's kernels change per block, forward and backward: eager, its RoPE
# (the rotate-half formulation's ~10 ops for q and k, each way) and SwiGLU (silu and the
# product) become one kernel each way; compiled, they stand beside inductor's fused kernels
# (norms, SwiGLU, RoPE: forward and backward) instead of inside them.
LIGER_KERNELS_PER_BLOCK = {"eager": -20, "compiled": 8, "graphs": 0}


@dataclass(frozen=True)
class ThroughputPrediction:
    tokens_per_s: float  # whole trial (all GPUs)
    sd: float  # one standard deviation of tokens_per_s


@dataclass(frozen=True)
class _Hardware:
    flops: float  # dense bf16 FLOP/s per device
    bytes_per_s: float  # HBM (or DRAM) bandwidth
    on_cuda: bool
    hopper_or_newer: bool = False  # compute capability 9.0 or more

    @classmethod
    def of(cls, target: Target) -> _Hardware:
        on_cuda = target.device_type != "cpu"
        name = target.device_name or ""
        return cls(
            flops=(peak_flops_for(name) if on_cuda else None) or CPU_FLOPS,
            bytes_per_s=(hbm_bandwidth_for(name) if on_cuda else None) or CPU_BYTES_PER_S,
            on_cuda=on_cuda,
            hopper_or_newer=on_cuda and (target.compute_capability or (0, 0)) >= (9, 0),
        )


def features(model: ModelSpec, knobs: Knobs, hw: _Hardware, num_gpus: int) -> np.ndarray:
    """Seconds per token per GPU of each term at nominal rates (before the fitted multipliers)."""
    x = dict.fromkeys(TERMS, 0.0)
    d, L, T = model.d_model, model.n_layer, model.seq_len
    vocab = padded_vocab(model.vocab_size, knobs.vocab_pad_multiple)
    # Every weight is cast, stepped and (FSDP2) gathered; a token's matmuls run through the
    # active ones (a mixture of experts' routed few).
    block_params = _block_params(model, active=False)
    head_params = vocab * d
    full = knobs.checkpointing == Checkpointing.FULL
    precision = knobs.precision.value
    rate = hw.flops * MATMUL_RATE_VS_BF16[precision]
    block_flops = (8.0 if full else 6.0) * _block_params(model, active=True)
    # cut-cross-entropy runs the output layer in its own kernels (loss_cce below).
    head_flops = 0.0 if knobs.kernels == Kernels.CCE else 6.0 * head_params
    if knobs.precision.is_fp8:
        x["mm_fp8"] = block_flops / rate
        # The LM head stays bf16 (workers/precision.py _FP8_SKIP).
        x["mm_half" if vocab % 64 == 0 else "mm_head_unaligned"] = head_flops / hw.flops
    else:
        column = {"bf16": "mm_half", "fp16": "mm_half", "tf32": "mm_tf32", "fp32": "mm_fp32"}
        x[column[precision]] = block_flops / rate
        head_column = column[precision]
        if vocab % 64:  # an unaligned vocab leaves tensor-core tiles ragged: its own efficiency
            head_column = "mm_head_unaligned"
        x[head_column] += head_flops / rate
    # Attention: PaLM's 12 L d T counts the full (non-causal) score matrix, forward and backward;
    # causal kernels skip the upper half. Recomputed blocks redo the forward (a third).
    attn_flops = 12.0 * L * model.q_dim * T * (4.0 / 3.0 if full else 1.0)
    attn_rate = hw.flops * min(MATMUL_RATE_VS_BF16[precision], 1.0)  # fp8 attention stays bf16
    if knobs.attention == Attention.MATH:
        # The math backend upcasts to fp32 (CUDA-core matmuls) and moves the fp32 T x T scores
        # about 16 times: written, masked, softmaxed, read by PV, and again in backward.
        score_bytes = model.n_head * T * 4.0 * 16 * L
        fp32_rate = hw.flops * MATMUL_RATE_VS_BF16["fp32"]
        x["attn_math"] = attn_flops / fp32_rate + score_bytes / hw.bytes_per_s
    else:
        x[f"attn_{knobs.attention.value}"] = 0.5 * attn_flops / attn_rate
    half = knobs.precision.is_half
    recompute = {Checkpointing.NONE: 1.0, Checkpointing.SELECTIVE: 1.3, Checkpointing.FULL: 1.4}
    block_bytes = block_activation_bytes(model, half) * 4.0 * recompute[knobs.checkpointing]
    compiled = knobs.compile_mode != CompileMode.NONE
    block_scope = compiled and knobs.compile_scope == CompileScope.BLOCK
    blocks_term = "elementwise_compiled" if compiled else "elementwise_eager"
    if knobs.kernels == Kernels.LIGER and model.family != ModelFamily.GPT2:
        liger_b = _liger_bytes(model, half) * recompute[knobs.checkpointing]
        block_bytes = max(0.0, block_bytes - liger_b)
        x["kernels_liger"] = L * liger_b / hw.bytes_per_s
    x[blocks_term] += L * block_bytes / hw.bytes_per_s
    micro_tokens = knobs.micro_batch_size * T  # per GPU
    if knobs.kernels == Kernels.CCE:
        host_s = CCE_KERNELS * LAUNCH_S + HOST_SYNC_S
        x["loss_cce"] = 8.0 * head_params / hw.flops + host_s / micro_tokens
    elif knobs.kernels != Kernels.NONE:
        x["loss_fused"] = _fused_loss_s(model, knobs, vocab, micro_tokens, hw)
    else:
        loss_bytes = vocab * 4.0 * 6  # fp32 logits: upcast, log-softmax, its gradient, read back
        # Block scope compiles the output layer with the loss as a region (workers/compiling.py).
        loss_term = "elementwise_compiled" if compiled else "elementwise_eager"
        x[loss_term] += loss_bytes / hw.bytes_per_s
    if block_scope:
        seams = L * d * 4.0 * 4 / hw.bytes_per_s  # fp32 output and its gradient, each way
        x["scope_block"] = seams + 2 * L * BLOCK_CALL_S / micro_tokens
    step_tokens = micro_tokens * knobs.grad_accum
    kind = (
        "graphs"
        if knobs.compile_mode == CompileMode.REDUCE_OVERHEAD
        else "compiled"
        if compiled
        else "eager"
    )
    # Block scope leaves the embedding, final norm, output layer and loss eager.
    kernels = KERNELS_PER_BLOCK[kind] * L + KERNELS_FIXED["eager" if block_scope else kind]
    if knobs.kernels == Kernels.LIGER and model.family != ModelFamily.GPT2:
        kernels = max(0, kernels + LIGER_KERNELS_PER_BLOCK[kind] * L)
    fp8_launches = 0.0
    if knobs.precision.is_fp8:  # eager float8 casts launch amax, scale and cast per linear
        fp8_kernels = FP8_KERNELS_PER_LINEAR[kind] * _linears_per_block(model) * L
        fp8_launches = fp8_kernels * LAUNCH_S / micro_tokens
    x[f"launch_{kind}"] = kernels * LAUNCH_S / micro_tokens + fp8_launches
    params = block_params + head_params
    shard = num_gpus if num_gpus > 1 and knobs.parallel.startswith("fsdp") else 1
    if knobs.optimizer == Optimizer.ADAMW_8BIT:
        calls = _tensors_per_block(model) * L + 3  # the embedding, the final norm, the head
        moved = params / shard * ADAMW_8BIT_BYTES_PER_PARAM / hw.bytes_per_s
        x["optimizer_8bit"] = (moved + calls * ADAMW_8BIT_CALL_S) / step_tokens
    else:
        opt = "optimizer_fused" if knobs.optimizer == Optimizer.ADAMW_FUSED else "optimizer_foreach"
        x[opt] = params / shard * ADAMW_BYTES_PER_PARAM / hw.bytes_per_s / step_tokens
    weight_bytes = _weight_bytes_per_micro_step(knobs, block_params, head_params) / shard
    x["weights_micro_step"] = weight_bytes / hw.bytes_per_s / micro_tokens
    if knobs.precision.is_fp8:
        weight_cast = block_params * FP8_WEIGHT_CAST_BYTES / hw.bytes_per_s / micro_tokens
        # The linears' inputs (q/k/v and gate/up read the normed d, o the attention output,
        # down the MLP width), each in, grad and out.
        widths = 2 * d + model.q_dim + mlp_width_per_token(model)
        act_cast = L * widths * 2 * 3.0 / hw.bytes_per_s
        x["fp8_cast"] = weight_cast + act_cast
        if knobs.precision == Precision.FP8_ROWWISE:
            x["fp8_rowwise"] = x["mm_fp8"] + x["fp8_cast"] + fp8_launches
    if num_gpus > 1:
        x["comm"] = _comm_bytes(knobs, params, num_gpus) / LINK_BYTES_PER_S / step_tokens
    return np.array([x[t] for t in TERMS])


def _weight_bytes_per_micro_step(knobs: Knobs, block_params: int, head_params: int) -> float:
    """Bytes every micro-step moves per weight, whatever its micro-batch: under autocast the
    half copy of each fp32 weight (read 4, write 2; again where full checkpointing recomputes
    the forward) and its gradient's cast back to fp32 (read 2, write 4), float8's block weights
    excepted (their cast is `fp8_cast`'s); with accumulation, each micro-step after the first
    adds its gradients into the kept ones (read both, write the sum: 12). Per token that is
    what makes a small micro-batch slow on a big model: Llama 8B at micro-batch 1 x 8 moves
    about 180 GB a micro-step for 2,048 tokens (on the H200 the 8-bit seed at 1 x 8 ran 9.5%
    slower than full checkpointing at 8 x 1, bench/results/h200_session_20261205)."""
    params = block_params + head_params
    if knobs.precision.is_fp8:
        cast_params = head_params
    elif knobs.precision.is_half:
        cast_params = params
    else:
        cast_params = 0
    copies = 2.0 if knobs.checkpointing == Checkpointing.FULL else 1.0
    moved = cast_params * (6.0 * copies + 6.0)
    if knobs.grad_accum > 1:
        moved += params * 12.0 * (knobs.grad_accum - 1) / knobs.grad_accum
    return moved


def _liger_bytes(model: ModelSpec, half: bool) -> float:
    """Bytes per token one block's norms, SwiGLU and RoPE move in Liger's kernels (one pass
    each, forward and backward), at the elementwise terms' 4x-the-saved-bytes convention over
    what they save: the two norms' fp32 inputs, SwiGLU's gate and up projections, RoPE's
    rotated q and k."""
    b = 2.0 if half else 4.0
    kv = model.kv_heads * model.head_dim
    return (2 * model.d_model * 4.0 + 2 * model.ffn_dim * b + (model.d_model + kv) * b) * 4.0


def _fused_loss_s(
    model: ModelSpec, knobs: Knobs, vocab: int, micro_tokens: int, hw: _Hardware
) -> float:
    """Seconds per token of Liger's fused linear cross-entropy beyond its matmuls (their FLOPs
    are the unfused head's: it computes the gradients in forward, no recompute). Each logit
    of a chunk is written by the matmul, read and overwritten with its gradient by the loss
    kernel, and read by the two gradient matmuls: 5 passes in the autocast dtype; the input's
    gradient is written in fp32. Per micro-step, each chunk's launches and one host sync."""
    b = 2.0 if knobs.precision.is_half else 4.0
    bytes_per_token = vocab * b * 5 + model.d_model * 4.0
    growth = -(-vocab // model.d_model)
    chunk = min(1 << max(0, (-(-micro_tokens // growth) - 1).bit_length()), micro_tokens)
    chunks = -(-micro_tokens // chunk)
    host_s = chunks * FUSED_CE_KERNELS_PER_CHUNK * LAUNCH_S + HOST_SYNC_S
    return bytes_per_token / hw.bytes_per_s + host_s / micro_tokens


def _block_params(model: ModelSpec, *, active: bool) -> int:
    """Matmul parameters of the transformer blocks (the part fp8 converts): all of them, or
    (`active`) those a token runs through."""
    d, ff = model.d_model, model.ffn_dim
    kv = model.kv_heads * model.head_dim
    if model.family == ModelFamily.GPT2:
        return model.n_layer * (4 * d * d + 2 * d * ff)
    attention = 2 * d * model.q_dim + 2 * d * kv
    return model.n_layer * attention + mlp_params(model, active=active)


def _linears_per_block(model: ModelSpec) -> int:
    return 4 if model.family == ModelFamily.GPT2 else 7  # qkv, out, fc1, fc2 / q, k, v, o, 3 MLP


def _tensors_per_block(model: ModelSpec) -> int:
    """Parameter tensors of one block: its linears' weights (GPT-2's biases too) and norms."""
    if model.family == ModelFamily.GPT2:
        return 2 * _linears_per_block(model) + 4  # weights, biases, two LayerNorms (w, b)
    return _linears_per_block(model) + 2  # bias-free linears, two RMSNorms


def _comm_bytes(knobs: Knobs, params: int, n: int) -> float:
    """Bytes each rank sends per optimizer step (ring collectives: 2(n-1)/n per all-reduce)."""
    ring = (n - 1) / n
    if knobs.parallel.startswith("fsdp"):
        param_b = 2.0 if knobs.precision.is_half else 4.0
        gathers = 1 if knobs.parallel == "fsdp2-no-reshard" else 2
        reduce_b = 2.0 if knobs.fsdp_reduce_dtype == "bf16" else 4.0
        return ring * params * (gathers * param_b + reduce_b) * knobs.grad_accum
    grad_b = 2.0 if knobs.grad_compression in ("fp16", "bf16") else 4.0
    return 2.0 * ring * params * grad_b


@dataclass
class ThroughputModel:
    """The study's throughput model: physics per term, multipliers fitted to its trials."""

    model: ModelSpec
    target: Target
    num_gpus: int
    _x: list[np.ndarray] = field(default_factory=list)
    _y: list[float] = field(default_factory=list)  # measured microseconds per token per GPU

    def __post_init__(self) -> None:
        self.hw = _Hardware.of(self.target)
        prior = PRIOR_MULTIPLIER | (HOPPER_PRIOR if self.hw.hopper_or_newer else {})
        self.prior_mean = np.array([prior[t] for t in TERMS])
        rel = PRIOR_REL_SD_GPU if self.hw.on_cuda else PRIOR_REL_SD_CPU
        self.prior_sd = self.prior_mean * rel
        self._refit()

    @property
    def measured(self) -> int:
        return len(self._y)

    def features(self, knobs: Knobs, model: ModelSpec | None = None) -> np.ndarray:
        """Microseconds per token per GPU of each term at nominal rates (of `model`, default
        the study's: a proxy trial's shallower model has the same terms, scaled)."""
        return features(model or self.model, knobs, self.hw, max(self.num_gpus, 1)) * 1e6

    def observe(
        self,
        knobs: Knobs,
        result: TrialResult,
        *,
        fit: bool = True,
        model: ModelSpec | None = None,
        features: np.ndarray | None = None,
    ) -> None:
        """Learn from a measured trial (failed and predicted ones carry no throughput); `model`:
        the one it ran, when not the study's (a proxy); `features`: its `features`, when the
        caller has them already (the evidence's replay)."""
        per_gpu = result.tokens_per_s_per_gpu or (
            result.tokens_per_s / max(self.num_gpus, 1) if result.tokens_per_s else None
        )
        if not per_gpu or "predicted" in result.notes:
            return
        self._x.append(features if features is not None else self.features(knobs, model))
        self._y.append(1e6 / per_gpu)
        if fit:
            self._refit()

    def refit(self) -> None:
        self._refit()

    def predict(self, knobs: Knobs) -> ThroughputPrediction:
        mean, sd = self.predict_many(self.features(knobs)[None, :])
        return ThroughputPrediction(float(mean[0]), float(sd[0]))

    def predict_many(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Whole-trial tokens/s and its sd for rows of `features` (vectorised for the proposer)."""
        us = np.maximum(X @ self.beta, 1e-9)
        var = np.einsum("ij,jk,ik->i", X, self.cov, X) + (self.rel_sd * us) ** 2
        gpus = max(self.num_gpus, 1)
        tokens_per_s = gpus * 1e6 / us
        # delta method: d(1/u) = du / u^2, relative sd carries over
        return tokens_per_s, tokens_per_s * np.sqrt(var) / us

    def _refit(self) -> None:
        fit = fit_relative(
            np.array(self._x).reshape(len(self._y), len(TERMS)),
            np.array(self._y),
            prior_mean=self.prior_mean,
            prior_sd=self.prior_sd,
            y_floor=1e-6,
            abs_sd=0.0,
            prior_rel_sd=0.1,
            min_rel_sd=MIN_REL_SD,
            beta_floor=0.02,
        )
        self.beta, self.cov, self.rel_sd = fit.beta, fit.cov, fit.rel_sd


def relative_error(predicted: float, measured: float) -> float:
    return predicted / measured - 1.0 if measured else math.inf
