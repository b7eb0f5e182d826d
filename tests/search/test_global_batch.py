"""Which global batch the trials run when the user gives none.

The built-in `single-gpu` space holds the expert default's (`global_batch_from_expert`: its
micro-batch x 4 accumulation steps x seq_len x GPUs, or 1 step where 4 steps' gradients do not
fit), fixed when the study starts, for every model preset; a space that holds none lets trials
differ, and the recommendation says which global batch the winner ran against the expert
default's, and the best at that one."""

from __future__ import annotations

from typing import Any

import pytest

from autotuner.executors.base import Target
from autotuner.executors.replay import Landscape, ReplayExecutor
from autotuner.presets import MODEL_PRESETS
from autotuner.purpose import Purpose
from autotuner.search.space import load_space
from autotuner.spec import ModelSpec
from autotuner.storage.models import TrialState
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.study.batch import global_batch_tokens
from autotuner.study.coordinator import StudyRunner, create_study
from tests.search.conftest import GPT2, H200, Run, gpt2_landscape, gpt2_space

CPU = Target("cpu", 0)
HELD = {"micro_batch_size": [8, 16, 32, 64, 128], "precision": ["bf16", "fp32"]}


@pytest.mark.parametrize("target", [H200, CPU], ids=["h200", "cpu"])
@pytest.mark.parametrize("preset", list(MODEL_PRESETS))
def test_single_gpu_holds_the_expert_defaults_global_batch(
    sqlite_url: str, preset: str, target: Target
) -> None:
    db = Database(sqlite_url)
    model = ModelSpec.resolve({"preset": preset})
    space = load_space("single-gpu")
    assert space.global_batch_from_expert == 4 and space.global_batch_tokens is None
    study_id = create_study(db, model=model, space=space, max_trials=20)
    executor = ReplayExecutor(Landscape([]), list(space.knobs), target=target)
    runner = StudyRunner(db, study_id, executor, poll_s=0.0)
    runner.start()
    expert = runner.policy.expert_params()
    held = runner.space.global_batch_tokens
    # Llama 8B on one H200: 4 steps' gradients do not fit beside the weights and AdamW's
    # moments (16 B/param, 120 GiB), so the expert runs without accumulating, checkpointed.
    steps = 1 if (preset, target) == ("llama-8b", H200) else 4
    assert held == expert["micro_batch_size"] * steps * model.seq_len
    # The expert default runs it exactly, with its accumulation steps; so do smaller micro-batches.
    knobs = runner.policy.knobs(expert)
    assert knobs.grad_accum == steps
    assert runner.space.global_batch_mismatch(knobs, model, 1) is None
    if steps == 1:
        assert expert["checkpointing"] == "full" and expert["micro_batch_size"] > 1
    assert runner.policy.screen(expert, knobs) is None or expert["micro_batch_size"] == 1
    # Stored: a coordinator that takes the study over runs the same global batch.
    with db.read() as s:
        assert StudyRepo(s).require(study_id).space["global_batch_tokens"] == held


def test_every_trial_runs_the_held_global_batch(db: Database, run_study: Run) -> None:
    space = gpt2_space(HELD, global_batch_from_expert=4)
    _, _, trials, rec = run_study(db, space=space, landscape=gpt2_landscape(HELD), trials=16)
    ran = [t for t in trials if t.state != TrialState.PRUNED]
    held = {global_batch_tokens(t.config, t.result) for t in ran}
    assert len(held) == 1 and len(ran) > 3, held
    (tokens,) = held
    assert tokens % (8 * GPT2.seq_len) == 0
    off = [
        t
        for t in trials
        if t.state == TrialState.PRUNED and "global batch" in (t.error_message or "")
    ]
    assert all(t.params["micro_batch_size"] * GPT2.seq_len > tokens for t in off)
    assert rec is not None and rec["global_batch"]["same_for_all"]
    assert rec["global_batch"]["tokens"] == tokens
    assert "the same in every measured trial" in rec["global_batch"]["text"]


def test_without_a_held_global_batch_the_winner_is_compared_with_the_expert_default(
    db: Database, run_study: Run
) -> None:
    knobs: dict[str, Any] = {"micro_batch_size": [8, 16, 32, 64], "precision": ["bf16"]}
    _, _, trials, rec = run_study(
        db, space=gpt2_space(knobs), landscape=gpt2_landscape(knobs), trials=8
    )
    assert rec is not None
    gb = rec["global_batch"]
    expert = min((t for t in trials if t.purpose == Purpose.EXPERT_DEFAULT), key=lambda t: t.number)
    expert_tokens = global_batch_tokens(expert.config)
    assert gb["expert_default"] == {"trial_number": expert.number, "tokens": expert_tokens}
    assert rec["vs_expert_default"]["trial_number"] == expert.number  # the same yardstick
    assert not gb["same_for_all"] and len(gb["sizes"]) > 1
    if gb["tokens"] != expert_tokens:
        ratio = gb["tokens"] / expert_tokens
        assert f"{ratio:.3g}x the expert default's {expert_tokens:,}" in gb["text"], gb
        same = gb["best_at_expert"]
        assert same is not None
        assert (
            global_batch_tokens(next(t for t in trials if t.number == same["trial_number"]).config)
            == expert_tokens
        )
        assert "compare like with like" in gb["text"]
    else:
        assert "as the expert default's" in gb["text"]
