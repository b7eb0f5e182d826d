"""The headroom check in a measured trial (MeasureSettings.headroom_check) on the real CPU torch:
after the timed repeats, one evaluation pass and a checkpoint save in the same process, their
peak reported, nothing written to disk; the timed measurement is unchanged by it."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import pytest
import torch

from autotuner.spec import TrialStatus
from workers.data import make_batches
from workers.headroom import eval_and_checkpoint
from workers.models import build_model
from workers.training import TrainStep, build_optimizer
from workers.trial import run_trial

from .conftest import FAST, make_config

CHECK = FAST.model_copy(update={"headroom_check": True})


def _big_files_in(path: str) -> set[str]:
    """Files over a megabyte under path (a checkpoint of the tiny model is one)."""
    files = {os.path.join(d, f) for d, _, names in os.walk(path) for f in names}
    return {f for f in files if os.path.getsize(f) > 2**20}


def _one_micro_batch_step(model, optimizer, batches) -> TrainStep:
    """An fp32 training step of one micro-batch on the CPU, as a trial builds it."""
    return TrainStep(
        model,
        optimizer,
        batches,
        grad_accum=1,
        autocast=lambda: torch.autocast("cpu", enabled=False),
        scaler=None,
        cudagraphs=False,
    )


@pytest.mark.parametrize("knobs", [{}, {"checkpointing": "full", "grad_accum": 2}])
def test_the_trial_reports_its_peak_with_eval_and_checkpoint(
    knobs: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A temp dir of this test's own: other processes' files in /tmp (a compiler's scratch
    # files under pytest-xdist) come and go while we look.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = _big_files_in(tempfile.gettempdir())
    result = run_trial(make_config(measure=CHECK, **knobs))
    assert result is not None and result.status == TrialStatus.OK, result
    assert result.memory_kind == "cpu_rss" and result.peak_mem_gib
    # The whole trial's resident peak, so never below the timed steps' peak.
    assert result.peak_mem_with_eval_ckpt_gib is not None
    assert result.peak_mem_with_eval_ckpt_gib >= result.peak_mem_gib
    assert result.peak_reserved_with_eval_ckpt_gib is None  # no allocator on the CPU
    assert any(n.startswith("headroom check: one evaluation pass") for n in result.notes)
    assert result.tokens_per_s and len(result.repeat_tokens_per_s) == FAST.repeats
    # The evaluation pass and the save are timed apart (workers/phases.py).
    assert result.phases_s is not None
    assert result.phases_s["eval"] > 0 and result.phases_s["checkpoint"] > 0
    size = next(n for n in result.notes if n.startswith("headroom check"))
    assert "serialized, not written to disk" in size
    # The checkpoint (megabytes) was not written: no file of that size appeared.
    assert not _big_files_in(tempfile.gettempdir()) - before


def test_without_the_check_nothing_more_runs_or_is_reported() -> None:
    result = run_trial(make_config())
    assert result is not None and result.status == TrialStatus.OK
    assert result.peak_mem_with_eval_ckpt_gib is None
    assert not any(n.startswith("headroom check") for n in result.notes)


def test_eval_runs_without_autograd_in_eval_mode_and_saves_a_loadable_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = make_config()
    cpu = torch.device("cpu")
    model = build_model(config.model, config.knobs)
    optimizer = build_optimizer(model, config.knobs.optimizer)
    batches = make_batches(config.knobs, config.measure, config.model, cpu, 0)
    seen: list[tuple[bool, bool]] = []
    model.register_forward_hook(lambda m, i, o: seen.append((m.training, torch.is_grad_enabled())))
    step = _one_micro_batch_step(model, optimizer, batches)
    step()  # one training step: the optimizer has its state
    kept = io.BytesIO()
    crc_before = torch.serialization.get_crc32_options()
    crc_in_save: list[bool] = []
    real_save = torch.save

    def save(*args, **kwargs):
        crc_in_save.append(torch.serialization.get_crc32_options())
        return real_save(*args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    size = eval_and_checkpoint(step, kept)
    # The counted save skips the checksums (time, no memory) and leaves torch's setting be.
    assert crc_in_save == [False]
    assert torch.serialization.get_crc32_options() == crc_before
    assert seen == [(True, True), (False, False)]  # train, then eval under no_grad
    assert model.training  # back to training
    params = sum(p.numel() for p in model.parameters())
    assert size > params * 4 * 3  # fp32 weights and both Adam moments were serialized
    assert size == len(kept.getvalue())
    state = torch.load(io.BytesIO(kept.getvalue()), weights_only=True)  # a real checkpoint
    assert set(state) == {"model", "optimizer"}
    assert torch.equal(state["model"]["lm_head.weight"], model.state_dict()["lm_head.weight"])


@pytest.mark.slow  # torchao's 8-bit step compiles on the CPU
def test_an_8bit_optimizers_checkpoint_holds_its_8bit_moments() -> None:
    """The headroom check of an 8-bit AdamW winner saves its 8-bit moments (2 B/param and their
    scales where fp32 moments are 8): the size the end-time plan expects of the save
    (search/end_time.py), and a state torchao loads back."""
    pytest.importorskip("torchao.optim")
    config = make_config(optimizer="adamw-8bit")
    cpu = torch.device("cpu")
    model = build_model(config.model, config.knobs)
    optimizer = build_optimizer(model, config.knobs.optimizer)
    batches = make_batches(config.knobs, config.measure, config.model, cpu, 0)
    step = _one_micro_batch_step(model, optimizer, batches)
    step()
    kept = io.BytesIO()
    size = eval_and_checkpoint(step, kept)
    eight_bit = sum(p.numel() for p in model.parameters() if p.numel() >= 4096)
    small = sum(p.numel() for p in model.parameters() if p.numel() < 4096)
    # fp32 weights, 8-bit moments for the matrices (fp32 for tensors under 4096 values).
    expected = 4 * (eight_bit + small) + 2.03 * eight_bit + 8 * small
    assert expected * 0.95 < size < expected * 1.15, (size, expected)
    state = torch.load(io.BytesIO(kept.getvalue()), weights_only=True)  # torchao allows it
    fresh = build_optimizer(build_model(config.model, config.knobs), config.knobs.optimizer)
    fresh.load_state_dict(state["optimizer"])
