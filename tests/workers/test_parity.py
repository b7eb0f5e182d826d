"""The worker's loss-parity mode (MeasureSettings.parity_steps) on the real CPU torch: the same
config gives the same curve twice, the loss falls on the learnable stream, a healthy precision
change stays within the numerics check's tolerance and the provoked drift does not."""

from __future__ import annotations

import math

import pytest

from autotuner.search.numerics import TOLERANCE_REL, compare_curves
from autotuner.spec import TrialStatus
from workers.trial import run_trial

from .conftest import FAST, make_config

STEPS = 40
PARITY = FAST.model_copy(update={"parity_steps": STEPS})


def curve(**knobs) -> list[float]:
    result = run_trial(make_config(measure=PARITY, **knobs))
    assert result is not None and result.status == TrialStatus.OK, result
    assert result.loss_curve is not None and len(result.loss_curve) == STEPS
    assert result.repeat_tokens_per_s == []  # no timing protocol
    assert any("parity trial" in n for n in result.notes)
    # Its first step (a compile, when compiled) apart from the rest (workers/phases.py).
    assert result.phases_s is not None and result.phases_s["first_step"] > 0
    assert result.phases_s["measure"] > 0
    assert result.compile_s is None  # eager: nothing compiled
    return result.loss_curve


@pytest.fixture(scope="module")
def reference() -> list[float]:
    return curve()


def test_the_same_config_gives_the_same_curve_and_the_loss_falls(reference) -> None:
    assert curve() == reference  # same seed, same tokens, same init: step for step
    assert all(math.isfinite(x) for x in reference)
    # From log(vocab) at the start, and clearly falling on the learnable stream.
    assert abs(reference[0] - math.log(512)) < 0.3
    assert sum(reference[-5:]) / 5 < reference[0] - 0.5


def test_bf16_passes_and_the_provoked_drift_fails_the_check(reference) -> None:
    bf16, _ = compare_curves(curve(precision="bf16"), reference)
    assert bf16 < TOLERANCE_REL / 10
    drift, _ = compare_curves(curve(fault="numerics_drift"), reference)
    assert drift > TOLERANCE_REL * 2


def test_the_parity_stream_is_the_same_on_every_device_and_precision() -> None:
    import torch

    from workers.data import ParityBatches

    a = ParityBatches(512, 2, 16, torch.device("cpu"), seed=3)
    b = ParityBatches(512, 2, 16, torch.device("cpu"), seed=3)
    for _ in range(3):
        (xa, ya), (xb, yb) = a.next(), b.next()
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
        assert torch.equal(xa[:, 1:], ya[:, :-1])  # y is x shifted by one
    assert len(torch.unique(xa)) <= 64  # a small alphabet: learnable


def test_a_headroom_check_with_parity_steps_is_both_checks_in_one_trial(reference) -> None:
    """The numerics check's candidate run inside the headroom check (search/numerics.py): the
    parity steps first, from the seed's weights, one micro-batch each: the same curve as a
    parity trial of the same config; then the trial as measured (its own accumulation and
    batches), the evaluation pass and the checkpoint save."""
    both = FAST.model_copy(update={"parity_steps": STEPS, "headroom_check": True})
    config = make_config(measure=both, grad_accum=2)
    result = run_trial(config)
    assert result is not None and result.status == TrialStatus.OK, result
    assert result.loss_curve == reference  # step for step what the parity trial trained
    assert result.tokens_per_s and len(result.repeat_tokens_per_s) == FAST.repeats
    # The timed steps ran the knobs' accumulation, not the parity steps' one micro-batch.
    assert result.tokens_per_step == config.knobs.micro_batch_size * config.model.seq_len * 2
    assert result.peak_mem_with_eval_ckpt_gib is not None
    phases = result.phases_s or {}
    assert phases["parity"] > 0 and phases["measure"] > 0 and phases["eval"] > 0
    assert any(n.startswith("numerics: 40 parity steps") for n in result.notes)
