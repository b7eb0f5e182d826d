"""The physical estimate: a trial's peak memory by component, before any calibration.

Parameters and FLOPs per token come from `autotuner.flops` (one convention for the whole
product). This module adds the peak-memory estimate that predicts OOM, as a sum of components:

| component              | what it counts (bytes)                                                 |
| static                 | fp32 weights and AdamW moments (12 B/param; 8-bit moments: 6), the     |
|                        | autocast weight copy                                                    |
|                        | (2), grads kept across micro-steps (4), DDP buckets, compression bufs;  |
|                        | under FSDP2 the fp32 states are sharded (1/N) and the unsharded         |
|                        | parameters of the layers being computed (or of all, without reshard)   |
| activations(_compiled) | what autograd keeps per token per layer (Korthikanti et al. 2022,       |
| (_compiled_fp8)        | "Reducing Activation Recomputation", re-derived for our blocks, without |
|                        | dropout), by precision and checkpointing; compiled graphs keep less,    |
|                        | compiled float8 less again (its own component, calibrated apart)        |
| scores                 | the T x T attention matrices the math backend materialises (fp32)       |
| logits(_compiled)      | the fp32 loss path over the vocab: upcast, log-softmax, its gradient    |
|                        | (compiled under either scope: block scope compiles the output region)   |
| logits_fused           | Liger's fused linear cross-entropy (kernels fused-ce, liger): one chunk |
|                        | of logits, the output layer's input gradient and its weight gradient    |
| logits_cce             | cut-cross-entropy's loss (kernels cce): no logits at all; the per-row   |
|                        | log-sum-exp and loss, the half input and its gradient, the weight's     |
|                        | half gradient and its fp32 cast                                         |
| base                   | allocator-visible constants (cuBLAS workspace, RNG, small buffers)      |
| optimizer_step         | how far the optimizer step's peak exceeds backward's (0 for most)       |
| graph_grads            | CUDA graphs with accumulation: how far the end of a micro-step's        |
|                        | backward (its gradients beside the accumulated ones) exceeds the others |

Each component is an honest physical estimate; `calibration.py` fits one multiplier per
component to what the study measures.

The peak falls at one of two moments. At the start of backward every activation and the loss
path are alive, and the gradients (set to None after each step) do not exist yet unless
accumulation keeps them across micro-steps. At the optimizer step the activations and the
autocast copies are gone, but every gradient exists (4 B/param) and the foreach AdamW holds one
fp32 temporary per parameter (its sqrt(v) + eps; the fused kernel none; the 8-bit AdamW two of
the one parameter it is updating). Where activations are
small beside the parameters (Llama 8B at micro-batch 1: 8.6 GiB of activations, 30 GiB of
gradients) the step's is the peak; measured on the CPU with real torch for a 207M-parameter
model with 42 MB of activations: 3.49 GiB fused and 4.26 GiB foreach, where the backward-only
estimate said 2.95 for both. The first moment's constants were checked against the H200
GPT-2 124M recording (bench/results/landscape_gpt2_124m_h200.json): eager bf16 and fp32 within
a few percent; the compile factors are fitted to its compiled trials.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from autotuner.flops import flops_per_token, param_count
from autotuner.spec import (
    Attention,
    Checkpointing,
    CompileMode,
    Kernels,
    Knobs,
    ModelFamily,
    ModelSpec,
    Optimizer,
)

GIB = 1024**3
COMPONENTS = (
    "static",
    "activations",
    "activations_compiled",
    "activations_compiled_fp8",
    "scores",
    "logits",
    "logits_compiled",
    "logits_fused",
    "logits_cce",
    "base",
    "optimizer_step",
    "graph_grads",
)
# Priors on what torch.compile saves: inductor's min-cut partitioner recomputes cheap pointwise
# ops in backward instead of saving their outputs, and fuses the loss (calibrated per study).
COMPILED_ACTIVATION_FACTOR = 0.72
COMPILED_LOGITS_FACTOR = 0.33  # inductor fuses the loss: bf16 logits and their gradient remain
# Compiled float8 keeps less again (likely: its casts fuse into the surrounding kernels and
# what backward needs of a linear's input is kept at one byte an element; not traced kernel by
# kernel). Fitted to the H200 landscapes (bench/memory_prior.py), where the bf16 factor left
# every compiled float8 config over-estimated, more with the micro-batch: +12% at micro-batch 2
# to +30% at 16 on Llama 1B.
COMPILED_FP8_ACTIVATION_FACTOR = 0.5


def total_params(model: ModelSpec, knobs: Knobs) -> int:
    """Every parameter the trial allocates: padded vocab and position embeddings included."""
    vocab = padded_vocab(model.vocab_size, knobs.vocab_pad_multiple)
    positions = model.seq_len * model.d_model if model.family == ModelFamily.GPT2 else 0
    return param_count(model, vocab_size=vocab) + positions


def largest_param(model: ModelSpec, knobs: Knobs) -> int:
    """Values in the model's largest parameter: the (padded) embedding, an MLP matrix,
    GPT-2's fused qkv projection, or a mixture of experts' fused gate and up projections of
    every expert (transformers 5 keeps them as one (n_experts, 2 x d_ff_expert, d) tensor:
    Qwen3-30B-A3B's, 403M values, is larger than its embedding)."""
    vocab = padded_vocab(model.vocab_size, knobs.vocab_pad_multiple)
    d = model.d_model
    experts = (model.n_experts or 0) * 2 * model.expert_ffn_dim * d
    return max(vocab * d, model.ffn_dim * d, 3 * d * d, experts)


def mlp_width_per_token(model: ModelSpec) -> float:
    """The MLP width one token's activations span, averaged over the layers: d_ff for a dense
    model; in a mixture-of-experts layer the n_experts_active experts it is routed to, plus
    the shared expert."""
    moe = model.moe_layer_count
    if not moe:
        return float(model.ffn_dim)
    routed = (model.n_experts_active or 0) * model.expert_ffn_dim + (model.d_ff_shared or 0)
    return (moe * routed + (model.n_layer - moe) * model.ffn_dim) / model.n_layer


def base_gib(on_cuda: bool) -> float:
    """Allocator-visible constants; on the CPU the peak is the RSS, torch's own included."""
    return 0.1 if on_cuda else 0.6


def padded_vocab(vocab: int, multiple: int) -> int:
    return -(-vocab // multiple) * multiple


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak memory of one trial by component (GiB), before calibration."""

    components: dict[str, float]
    on_cuda: bool
    # The CUDA allocator's mode (Knobs.allocator): not a component, the calibration's
    # fragmentation ratio (reserved / allocated) is learned per mode.
    allocator: str = "default"

    def vector(self) -> np.ndarray:
        return np.array([self.components.get(c, 0.0) for c in COMPONENTS])

    @property
    def allocated_gib(self) -> float:
        return float(sum(self.components.values()))


def estimate(
    model: ModelSpec, knobs: Knobs, *, num_gpus: int = 1, on_cuda: bool = True
) -> MemoryEstimate:
    """The uncalibrated peak of one training step, per GPU (the largest rank's)."""
    n = total_params(model, knobs)
    fsdp = num_gpus > 1 and knobs.parallel in ("fsdp2", "fsdp2-no-reshard")
    if fsdp:
        static_b = _fsdp_static_bytes(model, knobs, n, num_gpus)
    else:
        static_b = _replica_static_bytes(knobs, n, num_gpus)
    tokens = knobs.micro_batch_size * model.seq_len
    acts_b, scores_b = _activation_bytes_per_token(model, knobs, on_cuda)
    compiled = knobs.compile_mode != CompileMode.NONE
    # Compiled, the loss never holds its fp32 logits whole, under either scope: block scope
    # compiles the output layer with the loss as a region of its own (workers/compiling.py).
    loss_compiled = compiled
    comps = {c: 0.0 for c in COMPONENTS}
    comps["static"] = static_b / GIB
    if not compiled:
        comps["activations"] = tokens * acts_b / GIB
    elif knobs.precision.is_fp8:
        comps["activations_compiled_fp8"] = tokens * acts_b / GIB * COMPILED_FP8_ACTIVATION_FACTOR
    else:
        comps["activations_compiled"] = tokens * acts_b / GIB * COMPILED_ACTIVATION_FACTOR
    comps["scores"] = tokens * scores_b / GIB
    if knobs.kernels == Kernels.CCE:
        comps["logits_cce"] = cce_loss_bytes(model, knobs, tokens, sharded=fsdp) / GIB
    elif knobs.kernels != Kernels.NONE:
        comps["logits_fused"] = fused_loss_bytes(model, knobs, tokens, sharded=fsdp) / GIB
    else:
        logits_gib = tokens * logits_bytes_per_token(model, knobs) / GIB
        if loss_compiled:
            comps["logits_compiled"] = logits_gib * COMPILED_LOGITS_FACTOR
        else:
            comps["logits"] = logits_gib
    comps["base"] = base_gib(on_cuda)
    backward_gib = sum(comps.values()) - comps["base"]
    step_gib = _optimizer_step_bytes(model, knobs, n, num_gpus if fsdp else 1, static_b) / GIB
    comps["optimizer_step"] = max(0.0, step_gib - backward_gib)
    if on_cuda and not fsdp and knobs.compile_mode == CompileMode.REDUCE_OVERHEAD:
        graph_end_gib = _graph_grads_end_bytes(knobs, n, static_b) / GIB
        comps["graph_grads"] = max(0.0, graph_end_gib - max(backward_gib, step_gib))
    return MemoryEstimate(comps, on_cuda, knobs.allocator)


def _graph_grads_end_bytes(knobs: Knobs, n: int, static_b: float) -> float:
    """A third moment, under CUDA graphs with gradient accumulation: the trial adds each
    micro-step's gradients into buffers of its own (the static part's 4 B/param), since the
    next replay overwrites the backward graph's outputs (workers/training.py), so when a
    backward ends its fp32 gradients (4 B/param, in the graph's private pool) exist beside
    them. Where activations are small this is the peak: Llama 1B and 3B at micro-batch 1 with
    CUDA graphs on the H200 were 12-13% over the two other moments (27.5 and 68.9 GiB against
    24.1 and 59.9), 4-8% under this one. Without accumulation the outputs are the gradients."""
    if knobs.grad_accum <= 1:
        return 0.0
    return static_b + 4.0 * n


def _optimizer_step_bytes(
    model: ModelSpec, knobs: Knobs, n: int, shards: int, static_b: float
) -> float:
    """What is alive while the optimizer steps: the static part less the autocast copies (freed
    with the graph), plus the gradients where accumulation did not already keep them, plus the
    foreach AdamW's one fp32 temporary per parameter; under FSDP2 the gradients and the
    optimizer's work are sharded (`shards` ranks); the 8-bit AdamW's dequantised moments of one
    parameter."""
    step_b = static_b
    if shards == 1 and knobs.precision.is_half:
        step_b -= 2.0 * n  # the autocast weight copies (_replica_static_bytes adds them)
    if knobs.grad_accum == 1:
        step_b += 4.0 * n / shards
    if knobs.optimizer == Optimizer.ADAMW_FOREACH:
        step_b += 4.0 * n / shards
    elif knobs.optimizer == Optimizer.ADAMW_8BIT:
        # One parameter at a time, its two moments dequantised to fp32: measured on the CPU
        # with real torch (an 8192 x 8192 matrix: 512 MiB over the steady state, 2 x 4 B per
        # value), so the largest matrix sets it (Llama 8B's embedding: 3.9 GiB).
        step_b += 8.0 * largest_param(model, knobs) / shards
    return step_b


def _replica_static_bytes(knobs: Knobs, n: int, num_gpus: int) -> float:
    """One GPU, or DDP: every rank keeps a full replica."""
    # fp32 weights (4) + AdamW exp_avg, exp_avg_sq (8; 8-bit: 2 and the scales)
    static_b = (4.0 + knobs.optimizer.state_bytes_per_param) * n
    if knobs.precision.is_half:
        static_b += 2.0 * n  # autocast caches the bf16/fp16 copy of each weight for the step
    if knobs.grad_accum > 1:
        static_b += 4.0 * n  # fp32 grads live across micro-steps (else born during backward)
    if num_gpus > 1:
        static_b += 4.0 * n  # DDP gradient buckets
        if knobs.grad_compression != "none":
            static_b += 2.0 * n
    return static_b


def _fsdp_static_bytes(model: ModelSpec, knobs: Knobs, n: int, num_gpus: int) -> float:
    """FSDP2: the fp32 weights, moments (and accumulated grads) are sharded over the ranks; the
    parameters are all-gathered in the compute dtype one block at a time (with the next one
    prefetched), or kept unsharded from forward to backward without resharding."""
    shard = 1.0 / num_gpus
    static_b = (4.0 + knobs.optimizer.state_bytes_per_param) * n * shard
    if knobs.grad_accum > 1:
        static_b += 4.0 * n * shard
    param_b = 2.0 if knobs.precision.is_half or knobs.precision.is_fp8 else 4.0
    if knobs.parallel == "fsdp2-no-reshard":
        static_b += param_b * n
    else:
        static_b += param_b * 2.0 * n / max(model.n_layer, 1)
    # Reduce-scatter input: one block's unsharded gradients in the reduce dtype.
    reduce_b = 2.0 if knobs.fsdp_reduce_dtype == "bf16" else 4.0
    return static_b + reduce_b * n / max(model.n_layer, 1)


def block_activation_bytes(model: ModelSpec, half: bool) -> float:
    """Bytes of the tensors one transformer block saves for backward, per token, without
    checkpointing: also the throughput model's measure of a block's elementwise traffic."""
    d, ff, q = model.d_model, mlp_width_per_token(model), model.q_dim
    kv = model.kv_heads * model.head_dim
    b = 2.0 if half else 4.0
    llama = model.family != ModelFamily.GPT2
    # Tensors autograd saves in one block, in elements (no dropout: masks cost nothing):
    # attention: norm output (input of qkv), q/k/v (input of the kernel), kernel output
    # (input of the out-projection); llama also keeps the RoPE-rotated q and k.
    attn = d + (q + 2 * kv) + q + ((q + kv) if llama else 0)
    # MLP: norm output, fc1 output (GELU input) and GELU output (fc2 input); SwiGLU keeps
    # gate, up, silu(gate) and the product.
    mlp = d + (4 * ff if llama else 2 * ff)
    # Under autocast the residual stream stays fp32: each norm keeps its fp32 input.
    return (attn + mlp) * b + 2 * d * 4.0


def _activation_bytes_per_token(
    model: ModelSpec, knobs: Knobs, on_cuda: bool
) -> tuple[float, float]:
    """(saved activations, attention scores) per token, summed over layers, in bytes."""
    d, ff, L = model.d_model, mlp_width_per_token(model), model.n_layer
    q, kv = model.q_dim, model.kv_heads * model.head_dim
    half = knobs.precision.is_half
    b = 2.0 if half else 4.0
    llama = model.family != ModelFamily.GPT2
    full_block = block_activation_bytes(model, half)
    if knobs.checkpointing == Checkpointing.NONE:
        per_layer, extra = full_block, 0.0
        if _liger_swiglu_recomputes(model, knobs):
            per_layer -= ff * b
    elif knobs.checkpointing == Checkpointing.SELECTIVE:
        # Op-level policy (workers/models/checkpointing.py): every matmul and attention output
        # is kept, the norms and activations are recomputed; plus the block's input.
        matmul_outputs = (q + 2 * kv) + q + d + (2 * ff if llama else ff) + d
        per_layer, extra = matmul_outputs * b + d * 4.0, 0.0
    else:
        # Full: each block keeps only its input; backward recomputes one block at a time.
        per_layer, extra = d * 4.0, full_block
    embed_and_head = d * 4.0 * 2 + d * b  # embedding output, final norm input and output
    acts = L * per_layer + extra + embed_and_head
    scores = 0.0
    materialises = knobs.attention == Attention.MATH or (
        knobs.attention == Attention.FLEX and not on_cuda  # eager flex is a reference impl
    )
    if materialises:
        # SDPA math upcasts half inputs and keeps the fp32 softmax (n_head x T per token per
        # layer); the score matrix of the layer being computed is alive on top of it.
        layers_kept = 1 if knobs.checkpointing == Checkpointing.FULL else L
        per_score = 4.0
        if knobs.attention == Attention.MATH and (
            model.attention_softcap or model.attention_window
        ):
            per_score = explicit_math_score_bytes(model, half)
        scores = model.n_head * model.seq_len * per_score * (layers_kept + 1)
    return acts, scores


def explicit_math_score_bytes(model: ModelSpec, half: bool) -> float:
    """Bytes backward keeps per attention score where `math` attention runs as explicit
    matmuls (a model with a logit cap or a window shorter than the sequence:
    workers/models/attention.py): the fp32 softmax, its copy in a half compute dtype, tanh's
    output where the logits are capped, the dropout's mask and output where there is dropout.
    Twice SDPA math's 4 for Gemma 2 in bf16. Measured with saved-tensor hooks on the CPU
    (tests/search/test_memory_explicit_attention.py; the mask, shared by the heads and the
    batch, left out)."""
    kept = 4.0 + (2.0 if half else 0.0)
    if model.attention_softcap is not None:
        kept += 2.0 if half else 4.0
    if model.attention_dropout:
        kept += 2.0 if half else 8.0
    return kept


def _liger_swiglu_recomputes(model: ModelSpec, knobs: Knobs) -> bool:
    """Liger's SwiGLU (kernels=liger) saves the gate and up projections only and recomputes
    silu(gate) in backward (ops/swiglu.py), one ffn-wide tensor a layer fewer than eager
    autograd keeps. Compiled graphs already recompute it (the compiled factor), and GPT-2's
    GELU MLP has no such kernel. Liger's RMSNorm/LayerNorm save their input and the inverse
    RMS (or mean) as the fused eager kernels do, and its RoPE only the cos/sin tables, as the
    eager rotation does: no change there."""
    return (
        knobs.kernels == Kernels.LIGER
        and knobs.compile_mode == CompileMode.NONE
        and model.family != ModelFamily.GPT2
    )


def logits_bytes_per_token(model: ModelSpec, knobs: Knobs) -> float:
    """The eager loss path's peak per token: 12 bytes per (padded) vocab entry.

    The loss runs in fp32 whatever the precision (`F.cross_entropy(logits.float(), ...)`). In
    forward the half logits (2 B) are upcast (4 B) and log-softmaxed (4 B, saved for
    backward): 10 B at most, and neither the half logits nor their upcast are saved (the output
    layer's backward needs its input, the cast's nothing), so forward ends holding 4. Backward
    starts there, with every activation still alive: the loss's gradient over the vocab (4 B)
    and log-softmax's gradient out (4 B) beside the saved output, 12 B; the casts back (4 B to
    2 B) come after those are freed. Under fp32 the upcast is the logits themselves: 12 B too.
    """
    vocab = padded_vocab(model.vocab_size, knobs.vocab_pad_multiple)
    return vocab * 12.0


def fused_loss_bytes(
    model: ModelSpec, knobs: Knobs, tokens: int, *, sharded: bool = False
) -> float:
    """Liger's fused linear cross-entropy (liger_kernel/ops/fused_linear_cross_entropy.py,
    0.8.5) over `tokens` rows: the B x T x V logits never exist. Its forward walks the rows in
    chunks sized so that a chunk of logits holds about as many values as the output layer's
    input (chunk = next power of 2 of rows / ceil(V / d), at most every row), computes each
    chunk's loss and gradient in place, and accumulates the input's and the weight's gradients
    there and then (backward only scales them). Alive at its peak, the last chunk, beside every
    activation: the chunk (in the autocast dtype: 2 B, fp32 4 B), the input's gradient (the
    final norm's output is fp32 under autocast: 4 B x d a row), the weight's gradient (fp32,
    4 B a weight, held from forward until backward hands it to autograd; under FSDP2 the
    weight it sees is the all-gathered one, in the compute dtype) and the per-row loss. No
    recompute: the matmul FLOPs are the unfused path's."""
    vocab = padded_vocab(model.vocab_size, knobs.vocab_pad_multiple)
    d = model.d_model
    growth = -(-vocab // d)
    chunk = min(_next_power_of_2(-(-tokens // growth)), tokens)
    half = knobs.precision.is_half  # fp8 too: its output layer stays bf16
    chunk_b = chunk * vocab * (2.0 if half else 4.0)
    weight_b = 2.0 if sharded and half else 4.0
    return chunk_b + tokens * (d * 4.0 + 4.0) + vocab * d * weight_b


def cce_loss_bytes(model: ModelSpec, knobs: Knobs, tokens: int, *, sharded: bool = False) -> float:
    """cut-cross-entropy's loss (cut_cross_entropy/cce.py, 25.1.1) over `tokens` rows: no
    logits exist, not even a chunk (forward reduces each row's log-sum-exp on chip, backward
    recomputes the logits block by block). Its peak is its backward, the first thing backward
    runs, so every activation is alive beside it: per row the log-sum-exp and the loss (fp32,
    8 B), the half copy of the input it saved (the worker casts it to the autocast dtype: 2 B
    x d), the input's gradient in that dtype (2 B x d) and its cast back to fp32 (4 B x d); per
    vocab entry the logit average and the order it sorts (8 B); per weight the gradient in the
    half dtype (2 B) and, as autograd casts it back to the fp32 weight's dtype, the fp32 one
    (4 B) beside it. Its half copy of the weight stands where autocast's copy of the unfused
    output layer's would (the static part counts that). Under FSDP2 the gathered weight is
    already in the compute dtype: no cast back. Half precision only (support_rules)."""
    vocab = padded_vocab(model.vocab_size, knobs.vocab_pad_multiple)
    d = model.d_model
    rows_b = tokens * (8.0 + d * (2.0 + 2.0 + 4.0))
    weight_b = 2.0 if sharded else 2.0 + 4.0
    return rows_b + vocab * (8.0 + d * weight_b)


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def cost_summary(model: ModelSpec) -> dict[str, Any]:
    """Parameters and FLOPs per token, as the recommendation reports them."""
    return {"param_count": param_count(model), "flops_per_token": flops_per_token(model)}
