"""Llama 8B on one H200: fp32 AdamW state (with the weights and gradients, 16 B/param: 120 GiB)
left no config that keeps the study's 10% memory headroom, so a real study recommended nothing
(bench/results/h200_session_20261204: 9.7% free at best). With 8-bit moments in the space the
seeder turns to them right after the expert default, and the study recommends a config that
spends the freed memory on activations, checked against fp32 moments for numerics. Replayed on
a landscape whose memory behaves like a real GPU's (tests/fakes.py physical_landscape: the cost
model's components times hidden factors; its fp32-state configs need a little less than the
H200's did, so there the expert default keeps the headroom, as the real one did not)."""

from __future__ import annotations

from typing import Any

from autotuner.executors.base import Target
from autotuner.purpose import SEARCH_TRIALS, Purpose
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.models import Trial
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import StudyRunner, create_study
from tests.fakes import FAKE_H200, FakeParityReplay, physical_landscape

LLAMA_8B = ModelSpec.resolve({"preset": "llama-8b"})
FIXED = {"precision": "bf16", "compile_mode": "default", "attention": "flash"}


def _study(sqlite_url: str, optimizers: list[str]) -> tuple[dict[str, Any] | None, list[Trial]]:
    knobs = {
        "micro_batch_size": [1, 2, 4, 8],
        "checkpointing": ["none", "selective", "full"],
        "optimizer": optimizers,
    }
    db = Database(sqlite_url)
    space = parse_space({"name": "room", "knobs": knobs, "fixed": FIXED})
    study_id = create_study(db, model=LLAMA_8B, space=space, max_trials=12)
    landscape = physical_landscape(LLAMA_8B, knobs, fixed=FIXED)
    target = Target.from_fingerprint(FAKE_H200)
    executor = FakeParityReplay(landscape, list(knobs), target=target)
    StudyRunner(db, study_id, executor, poll_s=0.0, heartbeat_interval_s=3600).run()
    with db.read() as s:
        return StudyRepo(s).require(study_id).recommendation, TrialRepo(s).list(study_id)


def test_8bit_moments_give_llama_8b_a_recommendation_on_one_h200(sqlite_url: str) -> None:
    rec, trials = _study(sqlite_url, ["adamw-fused", "adamw-8bit"])
    assert rec is not None and rec.get("trial_number") is not None, rec
    assert rec["knobs"]["optimizer"] == "adamw-8bit"
    assert rec["knobs"]["checkpointing"] != "full"  # the room went to activations
    # The second trial was the 8-bit seed (right after the expert default, which had to
    # checkpoint every block).
    first = sorted((t for t in trials if t.purpose in SEARCH_TRIALS), key=lambda t: t.number)
    assert first[0].purpose == Purpose.EXPERT_DEFAULT  # first: it may not fit (no fp8 before it)
    assert first[0].params["optimizer"] == "adamw-fused"
    assert first[0].params["checkpointing"] == "full"
    assert first[1].params["optimizer"] == "adamw-8bit"
    # Its reference has fp32 moments, which at selective checkpointing would not fit (the
    # memory model): it recomputes every block, the same loss curve.
    (ref,) = [t for t in trials if t.purpose == "parity-ref"]
    ran = ref.config["knobs"]
    assert (ran["optimizer"], ran["checkpointing"]) == ("adamw-fused", "full")
    assert ran["micro_batch_size"] == rec["knobs"]["micro_batch_size"]
    num = rec["numerics"]
    assert num["checked"] and num["passed"], num
    assert "bf16 with fp32 AdamW moments" in num["text"]
    # It is faster than the expert default, which the recommendation says.
    assert rec["vs_expert_default"]["speedup"] > 1.0, rec["vs_expert_default"]
