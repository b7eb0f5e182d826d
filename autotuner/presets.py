"""Named model sizes. A user writes `preset: gpt2-124m` and may override any field.

GPT-2 presets keep the true GPT-2 vocabulary (50257): padding it to a multiple of 64/128 is a
knob the search decides (`vocab_pad_multiple`), not something baked into the preset.
"""

from typing import Any

MODEL_PRESETS: dict[str, dict[str, Any]] = {
    # CPU-sized models for the demo and the tests.
    "tiny": dict(family="gpt2", n_layer=2, d_model=64, n_head=4, vocab_size=512, seq_len=64),
    "llama-tiny": dict(
        family="llama", n_layer=2, d_model=64, n_head=4, n_kv_head=2, vocab_size=512, seq_len=64
    ),
    # GPT-2 family (Radford et al. 2019), context 1024, tied embeddings.
    "gpt2-124m": dict(
        family="gpt2", n_layer=12, d_model=768, n_head=12, vocab_size=50257, seq_len=1024
    ),
    "gpt2-350m": dict(
        family="gpt2", n_layer=24, d_model=1024, n_head=16, vocab_size=50257, seq_len=1024
    ),
    "gpt2-774m": dict(
        family="gpt2", n_layer=36, d_model=1280, n_head=20, vocab_size=50257, seq_len=1024
    ),
    "gpt2-1.5b": dict(
        family="gpt2", n_layer=48, d_model=1600, n_head=25, vocab_size=50257, seq_len=1024
    ),
    # Llama-3.2/3.1-shaped models (RMSNorm, SwiGLU, RoPE, GQA).
    "llama-1b": dict(
        family="llama",
        n_layer=16,
        d_model=2048,
        n_head=32,
        n_kv_head=8,
        d_ff=8192,
        vocab_size=128256,
        seq_len=2048,
        tie_embeddings=True,
    ),
    "llama-3b": dict(
        family="llama",
        n_layer=28,
        d_model=3072,
        n_head=24,
        n_kv_head=8,
        d_ff=8192,
        vocab_size=128256,
        seq_len=2048,
        tie_embeddings=True,
    ),
    "llama-8b": dict(
        family="llama",
        n_layer=32,
        d_model=4096,
        n_head=32,
        n_kv_head=8,
        d_ff=14336,
        vocab_size=128256,
        seq_len=2048,
        tie_embeddings=False,
    ),
}
