"""Model FLOPs per token and per-GPU peak rates, for MFU.

Convention (PaLM appendix B, as in nanoGPT): FLOPs per token = 6 * N + 12 * L * d * T, where N
counts the parameters that take part in matmuls per token (embeddings included once when tied,
position embeddings excluded; of a mixture of experts, the experts a token is routed to), L
layers, d = n_head * head_dim, T the sequence length. The
attention term counts the full T x T score matrix (non-causal), as PaLM does; a layer whose
sliding window is shorter than T counts T x window (each query's keys, as many as the window
lets it see, under the same non-causal reading), as the trial finds its layers' windows.
Vocab padding is not counted: padded rows are wasted work, so padding must not raise MFU by
itself.

Peak rates are dense bf16 tensor-core FLOP/s (no sparsity). fp8 runs are also measured against
the bf16 peak, so MFU stays comparable across precisions (stated with each result).
"""

from __future__ import annotations

from autotuner.spec import ModelFamily, ModelSpec

FLOPS_CONVENTION = (
    "6N+12LdT (PaLM/nanoGPT; non-causal attention, a sliding-window layer's window for T; "
    "bf16 dense peak, also for fp8)"
)

# Substrings of torch.cuda.get_device_name(), most specific first.
PEAK_BF16_FLOPS: list[tuple[str, float]] = [
    ("GH200", 989.5e12),
    ("H200", 989.5e12),
    ("H100 PCIe", 756.0e12),
    ("H100 NVL", 835.0e12),
    ("H100", 989.5e12),
    ("H800", 989.5e12),
    ("B200", 2250.0e12),
    ("A100", 312.0e12),
    ("A800", 312.0e12),
    ("L40S", 362.0e12),
    ("L4", 121.0e12),
    ("A10G", 70.0e12),
    ("A10", 125.0e12),
    ("RTX 4090", 165.2e12),
    ("V100", 125.0e12),  # fp16 tensor cores; V100 has no bf16
]


# HBM bandwidth in bytes/s (vendor figures), for the throughput model's memory-bound work.
HBM_BYTES_PER_S: list[tuple[str, float]] = [
    ("GH200", 4.0e12),
    ("H200", 4.8e12),
    ("H100 PCIe", 2.0e12),
    ("H100 NVL", 3.9e12),
    ("H100", 3.35e12),
    ("H800", 3.35e12),
    ("B200", 8.0e12),
    ("A100", 2.0e12),
    ("A800", 2.0e12),
    ("L40S", 0.864e12),
    ("L4", 0.3e12),
    ("A10G", 0.6e12),
    ("A10", 0.6e12),
    ("RTX 4090", 1.0e12),
    ("V100", 0.9e12),
]
# Dense matmul rate of each precision relative to the bf16 peak (Hopper-class tensor cores:
# fp8 doubles it, TF32 halves it, plain fp32 runs on the CUDA cores at about 1/15).
MATMUL_RATE_VS_BF16 = {
    "bf16": 1.0,
    "fp16": 1.0,
    "fp8-tensorwise": 2.0,
    "fp8-rowwise": 2.0,
    "tf32": 0.5,
    "fp32": 1.0 / 15.0,
}


def hbm_bandwidth_for(device_name: str) -> float | None:
    """HBM bytes/s for a device name, or None when unknown (e.g. CPU)."""
    for key, bandwidth in HBM_BYTES_PER_S:
        if key.lower() in device_name.lower():
            return bandwidth
    return None


def peak_flops_for(device_name: str) -> float | None:
    """Dense bf16 peak FLOP/s for a device name, or None when unknown (e.g. CPU)."""
    for key, peak in PEAK_BF16_FLOPS:
        if key.lower() in device_name.lower():
            return peak
    return None


def param_count(model: ModelSpec, vocab_size: int | None = None) -> int:
    """Every parameter of the model, computed from the shapes (positions excluded): what
    memory holds. A mixture of experts counts all its experts."""
    return _count(model, vocab_size, active=False)


def active_param_count(model: ModelSpec) -> int:
    """The parameters one token is multiplied by: N of the FLOPs convention. Equal to
    param_count for a dense model; a mixture of experts counts its router, its shared expert
    and n_experts_active of its routed experts in each MoE layer."""
    return _count(model, None, active=True)


def _count(model: ModelSpec, vocab_size: int | None, *, active: bool) -> int:
    d, L, ff = model.d_model, model.n_layer, model.ffn_dim
    vocab = vocab_size or model.vocab_size
    embed = vocab * d * (1 if model.tie_embeddings else 2)
    if model.family == ModelFamily.GPT2:
        per_layer = (d * 3 * d + 3 * d) + (d * d + d) + (2 * d * ff + ff + d) + 4 * d
        return L * per_layer + 2 * d + embed
    # Llama-style (and our reading of HF configs): RMSNorm, SwiGLU MLPs, no biases but the
    # q/k/v ones where the model has them. Fused projections (Phi-3's qkv_proj and
    # gate_up_proj) hold the same values as separate ones.
    q, kv = model.q_dim, model.kv_heads * model.head_dim
    attention = d * q + 2 * d * kv + q * d + ((q + 2 * kv) if model.qkv_bias else 0)
    norms = 2 * d
    return L * (attention + norms) + mlp_params(model, active=active) + d + embed


def mlp_params(model: ModelSpec, *, active: bool) -> int:
    """The parameters of every layer's MLP, Llama-style (SwiGLU: three matrices). A mixture of
    experts' layer holds a router, a shared expert where it has one, and its routed experts:
    all of them, or (`active`) the n_experts_active a token runs through."""
    d, L = model.d_model, model.n_layer
    moe = model.moe_layer_count
    mlps = (L - moe) * 3 * d * model.ffn_dim
    if moe:
        assert model.n_experts is not None and model.n_experts_active is not None
        experts = model.n_experts_active if active else model.n_experts
        router = d * model.n_experts
        # The shared expert's scalar gate (Qwen2-MoE's shared_expert_gate, d values a layer)
        # is not counted.
        shared = 3 * d * model.d_ff_shared if model.d_ff_shared else 0
        mlps += moe * (experts * 3 * d * model.expert_ffn_dim + router + shared)
    return mlps


def flops_per_token(
    model: ModelSpec, params: int | None = None, attention_spans: list[int] | None = None
) -> float:
    """Training FLOPs per token (forward + backward) under FLOPS_CONVENTION: N the parameters
    a token is multiplied by (a mixture of experts' active ones). `params`: N counted on the
    built module (a user's factory model, whose shapes the spec only estimates).
    `attention_spans`: how many keys each attention layer's queries span, where a sliding
    window makes that fewer than T for some (what the trial's model reports); else T each."""
    n = active_param_count(model) if params is None else params
    spans = sum(attention_spans) if attention_spans else model.n_layer * model.seq_len
    return 6.0 * n + 12.0 * model.q_dim * spans


def mfu(tokens_per_s_per_gpu: float, flops_per_tok: float, peak: float) -> float:
    return tokens_per_s_per_gpu * flops_per_tok / peak
