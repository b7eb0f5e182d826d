"""Model FLOPs per token and per-GPU peak rates, for MFU.

Convention (PaLM appendix B, as in nanoGPT): FLOPs per token = 6 * N + 12 * L * d * T, where N
counts the parameters that take part in matmuls per token (embeddings included once when tied,
position embeddings excluded), L layers, d = n_head * head_dim, T the sequence length. The
attention term counts the full T x T score matrix (non-causal), as PaLM does. Vocab padding is not
counted: padded rows are wasted work, so padding must not raise MFU by itself.

Peak rates are dense bf16 tensor-core FLOP/s (no sparsity). fp8 runs are also measured against
the bf16 peak, so MFU stays comparable across precisions (stated with each result).
"""

from __future__ import annotations

from autotuner.spec import ModelFamily, ModelSpec

FLOPS_CONVENTION = "6N+12LdT (PaLM/nanoGPT; non-causal attention; bf16 dense peak, also for fp8)"

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
    """Parameters of the built-in families, computed from the shapes (positions excluded)."""
    d, L, ff = model.d_model, model.n_layer, model.ffn_dim
    vocab = vocab_size or model.vocab_size
    kv_dim = model.kv_heads * model.head_dim
    if model.family == ModelFamily.GPT2:
        per_layer = (d * 3 * d + 3 * d) + (d * d + d) + (2 * d * ff + ff + d) + 4 * d
        final_norm = 2 * d
    else:  # llama-style (and our estimate for HF configs): no biases, RMSNorm, SwiGLU
        per_layer = d * d + 2 * d * kv_dim + d * d + 3 * d * ff + 2 * d
        final_norm = d
    embed = vocab * d * (1 if model.tie_embeddings else 2)
    return L * per_layer + final_norm + embed


def flops_per_token(model: ModelSpec, params: int | None = None) -> float:
    """Training FLOPs per token (forward + backward) under FLOPS_CONVENTION. `params`: N counted
    on the built module (a user's factory model, whose shapes the spec only estimates)."""
    n = param_count(model) if params is None else params
    return 6.0 * n + 12.0 * model.n_layer * model.d_model * model.seq_len


def mfu(tokens_per_s_per_gpu: float, flops_per_tok: float, peak: float) -> float:
    return tokens_per_s_per_gpu * flops_per_tok / peak
