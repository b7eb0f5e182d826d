"""The memory model's loss path under compile_scope and kernels, checked against numbers
derived by hand for a 128k-vocabulary model (Llama 1B's shapes: d 2048, vocab 128,256, 16
layers, d_ff 8192, sequence 2048), at micro-batch 8 (16,384 tokens)."""

from __future__ import annotations

from typing import Any

from pytest import approx

from autotuner.search.costmodel import estimate
from autotuner.search.costmodel.memory import COMPILED_LOGITS_FACTOR, GIB
from autotuner.search.space import parse_space
from autotuner.spec import Knobs, ModelSpec
from tests.search.conftest import H200, make_policy

LLAMA1B = ModelSpec.resolve({"preset": "llama-1b"})
TOKENS = 8 * 2048


def _comps(**knobs: Any) -> dict[str, float]:
    base = {"precision": "bf16", "attention": "flash", "micro_batch_size": 8}
    return estimate(LLAMA1B, Knobs(**{**base, **knobs})).components


def test_the_eager_loss_path_is_12_bytes_per_vocab_entry() -> None:
    # log-softmax's saved output, the loss's gradient and log-softmax's gradient: fp32 each.
    # 128,256 x 12 B x 16,384 tokens = 128,256 x 12 / 65,536 GiB = 23.484375 GiB.
    eager = _comps(compile_mode="none")
    assert eager["logits"] == approx(23.484375)
    assert eager["logits_compiled"] == eager["logits_fused"] == 0.0
    # A compiled loss fuses (its prior factor), in the whole-model graph or, under block
    # scope, in the output region compiled beside the blocks.
    model = _comps(compile_mode="default")
    assert model["logits_compiled"] == approx(23.484375 * COMPILED_LOGITS_FACTOR)
    block = _comps(compile_mode="default", compile_scope="block")
    assert block["logits_compiled"] == model["logits_compiled"] and block["logits"] == 0.0
    # The blocks are compiled under either scope: the same activation component.
    assert block["activations_compiled"] == approx(model["activations_compiled"])


def test_fused_ce_keeps_a_chunk_and_the_output_layers_gradients() -> None:
    # Liger's chunking: ceil(128,256 / 2,048) = 63; ceil(16,384 / 63) = 261 rows -> 512 (the
    # next power of 2). The chunk: 512 x 128,256 bf16 = 131,334,144 B. The input's gradient:
    # 16,384 x 2,048 fp32 = 134,217,728 B, the per-row loss 65,536 B; the weight's gradient:
    # 128,256 x 2,048 fp32 = 1,050,673,152 B. In all 1,316,290,560 B = 1.2259 GiB.
    expected = (131_334_144 + 134_217_728 + 65_536 + 1_050_673_152) / GIB
    for scope in ("model", "block"):
        for compile_mode in ("none", "default"):
            if scope == "block" and compile_mode == "none":
                continue
            fused = _comps(kernels="fused-ce", compile_mode=compile_mode, compile_scope=scope)
            assert fused["logits_fused"] == approx(expected)
            assert fused["logits"] == fused["logits_compiled"] == 0.0
    assert expected == approx(1.2259, abs=1e-4)
    # What it frees: eager 23.48 - 1.23 = 22.26 GiB; compiled 7.75 - 1.23 = 6.52 GiB.
    none = estimate(LLAMA1B, Knobs(precision="bf16", attention="flash", micro_batch_size=8))
    fused = estimate(
        LLAMA1B, Knobs(precision="bf16", attention="flash", micro_batch_size=8, kernels="fused-ce")
    )
    assert none.allocated_gib - fused.allocated_gib == approx(23.484375 - expected)
    # fp32: the chunk is fp32 (512 x 128,256 x 4 B), the rest the same.
    fp32 = _comps(kernels="fused-ce", precision="fp32", attention="efficient")
    assert fp32["logits_fused"] == approx(expected + 131_334_144 / GIB)


def test_liger_also_drops_swiglus_saved_activation_in_eager_blocks() -> None:
    # Liger's SwiGLU recomputes silu(gate): 8,192 x 2 B a token a layer fewer, x 16 layers x
    # 16,384 tokens = 4 GiB exactly. Compiled graphs already recompute it: no change there.
    fused, liger = _comps(kernels="fused-ce"), _comps(kernels="liger")
    assert fused["activations"] - liger["activations"] == approx(4.0)
    assert liger["logits_fused"] == fused["logits_fused"]
    compiled = {"compile_mode": "default"}
    assert _comps(kernels="liger", **compiled)["activations_compiled"] == approx(
        _comps(kernels="fused-ce", **compiled)["activations_compiled"]
    )


def test_a_fused_loss_lets_a_larger_micro_batch_fit() -> None:
    """The expert default's micro-batch search and the proposer read the same memory model: on
    the H200 (139.8 GiB, 10% kept free) fused-ce fits a larger micro-batch than the unfused
    loss, eager and compiled (a micro-batch a step, so the compiled gain shows: whole-model
    compile already keeps a third of the loss path)."""
    space = parse_space(
        {
            "name": "kernels-test",
            "knobs": {
                "micro_batch_size": list(range(1, 65)),
                "kernels": ["none", "fused-ce"],
                "compile_mode": ["none", "default"],
            },
            "fixed": {"precision": "bf16", "attention": "flash", "vocab_pad_multiple": 64},
        }
    )
    policy = make_policy(space, model=LLAMA1B, target=H200)
    seeder = policy._seeder()
    for compile_mode in ("none", "default"):
        plain = seeder._largest_fitting_mb({"kernels": "none", "compile_mode": compile_mode})
        fused = seeder._largest_fitting_mb({"kernels": "fused-ce", "compile_mode": compile_mode})
        assert plain is not None and fused is not None and fused > plain, compile_mode


def test_the_proposer_takes_the_fused_loss_to_the_micro_batch_it_fits() -> None:
    """After the expert default (unfused, eager, micro-batch 8) measured a peak
    20% over its prediction, the unfused logits at micro-batch 16 no longer surely fit; the
    proposer's next config is a larger micro-batch with the fused loss, whose fit probability
    from the same calibrated memory model is near 1."""
    from tests.fakes import measured

    space = parse_space(
        {
            "name": "kernels-proposal",
            "knobs": {"micro_batch_size": [1, 2, 4, 8, 16, 32], "kernels": ["none", "fused-ce"]},
            "fixed": {
                "precision": "bf16",
                "attention": "flash",
                "vocab_pad_multiple": 64,
                # Eager: the unfused loss holds its fp32 logits whole (a compiled one does not).
                "compile_mode": "none",
            },
        }
    )
    policy = make_policy(space, model=LLAMA1B, target=H200)
    policy.enable_proposals(seed=0)
    expert = policy.expert_params()
    # The eager loss's fp32 logits: the unfused loss fits micro-batch 8.
    assert expert == {"kernels": "none", "micro_batch_size": 8}
    peak = policy.cost.predict(policy.knobs(expert)).allocated_gib
    result = measured(60_000.0, wall_s=100.0, peak_mem_gib=1.2 * peak)
    policy.observe(0, expert, result, "expert-default")
    proposal = policy.suggest(set())
    assert proposal is not None and proposal["kernels"] == "fused-ce", proposal
    assert proposal["micro_batch_size"] > expert["micro_batch_size"], proposal


def test_the_numerics_reference_recomputes_where_the_unfused_logits_would_not_fit() -> None:
    """The check's reference runs the unfused loss, whose logits the candidate never kept: at
    a micro-batch only the fused loss fits (eager Llama 1B, 16), the reference recomputes
    every block to make room (the same loss curve); where both fit (8), it keeps the
    candidate's checkpointing."""
    space = parse_space(
        {
            "name": "kernels-reference",
            "knobs": {"micro_batch_size": [8, 16], "kernels": ["none", "fused-ce"]},
            "fixed": {"precision": "bf16", "attention": "flash", "compile_mode": "none"},
        }
    )
    policy = make_policy(space, model=LLAMA1B, target=H200)
    for mb, checkpointing in ((8, "none"), (16, "full")):
        candidate = policy.knobs({"micro_batch_size": mb, "kernels": "fused-ce"})
        reference = policy.reference_knobs(candidate)
        assert reference is not None
        assert (reference.kernels, reference.checkpointing) == ("none", checkpointing), mb


def test_cce_keeps_no_logits_only_rows_and_the_output_layers_gradients() -> None:
    # cut-cross-entropy: per row the log-sum-exp and loss (8 B), the half input, its half
    # gradient and the fp32 cast of it (8 B x 2,048): 16,384 x 16,392 = 268,566,528 B; per
    # vocab entry the logit average and sort order (8 B) and per weight the half gradient and
    # its fp32 cast (6 B x 2,048): 128,256 x 12,296 = 1,577,035,776 B. 1.7188 GiB in all, under
    # every compile (its kernels are the same whoever calls them).
    expected = (268_566_528 + 1_577_035_776) / GIB
    assert expected == approx(1.7188, abs=1e-4)
    for knobs in ({}, {"compile_mode": "default"}, {"compile_scope": "block"}):
        cce = _comps(kernels="cce", **knobs)
        assert cce["logits_cce"] == approx(expected)
        assert cce["logits"] == cce["logits_compiled"] == cce["logits_fused"] == 0.0
    # Beside Liger's: no chunk of logits, but the weight's gradient passes through bf16 first
    # (Liger accumulates it in fp32 from forward on).
    fused = _comps(kernels="fused-ce")["logits_fused"]
    assert _comps(kernels="cce")["logits_cce"] - fused == approx(
        (1_845_602_304 - 1_316_290_560) / GIB
    )
    # Under FSDP2 the gathered weight is bf16 already: its gradient stays bf16 (2 B a weight).
    sharded = estimate(
        LLAMA1B,
        Knobs(
            precision="bf16", attention="flash", micro_batch_size=8, kernels="cce", parallel="fsdp2"
        ),
        num_gpus=2,
    )
    assert sharded.components["logits_cce"] == approx(
        (268_566_528 + 128_256 * (8 + 2 * 2048)) / GIB
    )


def test_cce_lets_a_larger_micro_batch_fit_than_the_unfused_loss() -> None:
    space = parse_space(
        {
            "name": "cce-test",
            "knobs": {"micro_batch_size": list(range(1, 65)), "kernels": ["none", "cce"]},
            "fixed": {"precision": "bf16", "attention": "flash", "vocab_pad_multiple": 64},
        }
    )
    seeder = make_policy(space, model=LLAMA1B, target=H200)._seeder()
    plain = seeder._largest_fitting_mb({"kernels": "none"})
    cce = seeder._largest_fitting_mb({"kernels": "cce"})
    assert plain is not None and cce is not None and cce > plain
