"""The memory model's bytes per attention score for `math` attention run as explicit matmuls
(a model that caps its logits or keeps a window: workers/models/attention.py), against the
bytes backward really keeps, counted with saved-tensor hooks on one CPU attention call."""

from __future__ import annotations

from typing import Any

import pytest

from autotuner.search.costmodel.memory import explicit_math_score_bytes
from autotuner.spec import Attention, ModelSpec

torch = pytest.importorskip("torch")

B, H, T, D = 1, 4, 256, 32


def _kept_per_score(dtype: Any, **kwargs: Any) -> float:
    """Bytes saved for backward per score element, q, k and v (the inputs) and the boolean
    mask (T x T, shared by heads and batch) left out."""
    from workers.models.attention import attend

    seen: dict[tuple[int, int, Any], int] = {}

    def pack(t: Any) -> Any:
        if t.dtype != torch.bool:
            seen[(t.data_ptr(), t.numel(), t.dtype)] = t.numel() * t.element_size()
        return t

    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, dtype=dtype, requires_grad=True) for _ in range(3))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attend(q, k, v, Attention.MATH, **kwargs)
    inputs = 3 * B * H * T * D * q.element_size()
    return (sum(seen.values()) - inputs) / (B * H * T * T)


def _model(cap: float | None, window: int | None, dropout: float) -> ModelSpec:
    config = {
        "model_type": "gemma2",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 512,
        "attn_logit_softcapping": cap,
        "sliding_window": window,
        "attention_dropout": dropout,
    }
    return ModelSpec.resolve({"hf_config": config, "seq_len": T})


@pytest.mark.parametrize("half", [True, False], ids=["bf16", "fp32"])
@pytest.mark.parametrize(
    "cap, window, dropout",
    [(50.0, None, 0.0), (None, 64, 0.0), (50.0, 64, 0.0), (50.0, None, 0.1)],
    ids=["capped", "windowed", "capped-windowed", "capped-dropout"],
)
def test_explicit_math_attention_keeps_what_the_memory_model_counts(
    half: bool, cap: float | None, window: int | None, dropout: float
) -> None:
    dtype = torch.bfloat16 if half else torch.float32
    kwargs = {"softcap": cap, "window": window, "dropout_p": dropout}
    measured = _kept_per_score(dtype, **kwargs)
    assert explicit_math_score_bytes(_model(cap, window, dropout), half) == pytest.approx(
        measured, abs=0.01
    )


def test_gemma2s_math_configs_count_twice_sdpa_maths_scores() -> None:
    """Gemma 2 runs math attention as explicit matmuls (its logits are capped): in bf16 its
    score matrices keep 8 bytes an entry, where SDPA math's keep 4."""
    from pathlib import Path

    from autotuner.inputs import load_model_spec
    from autotuner.search.costmodel import memory
    from autotuner.spec import Knobs

    examples = Path(__file__).resolve().parents[2] / "examples" / "hf"
    gemma = load_model_spec(examples / "gemma-2-2b.yaml")
    assert gemma.hf_config is not None
    uncapped = gemma.model_copy(
        update={"hf_config": {**gemma.hf_config, "attn_logit_softcapping": None}}
    )
    knobs = Knobs(precision="bf16", attention="math", micro_batch_size=1)
    capped_gib = memory.estimate(gemma, knobs).components["scores"]
    plain_gib = memory.estimate(uncapped, knobs).components["scores"]
    assert capped_gib == pytest.approx(2 * plain_gib)
    # 26 layers of 8 heads x 4096 x 4096 entries at 8 bytes, and the one being computed
    assert capped_gib == pytest.approx(8 * 4096 * 4096 * 8 * 27 / 2**30)
