"""Earlier studies' memory evidence (search/memory_history.py): a later study of the same model
on the same GPU starts with its memory model calibrated on what the earlier ones measured and
ran out of memory on, against the physical fake GPU (tests/fakes.py physical_landscape), whose
memory the uncalibrated prior gets 10-35% wrong."""

from __future__ import annotations

from typing import Any

import pytest

from autotuner.executors.base import Target
from autotuner.executors.replay import ReplayExecutor
from autotuner.options import StudyOptions
from autotuner.purpose import END_CHECKS
from autotuner.search.costmodel import CostModel
from autotuner.search.memory_history import earlier_memory
from autotuner.search.space import parse_space
from autotuner.storage.study_repo import StudyRepo
from autotuner.study.coordinator import StudyRunner, create_study
from autotuner.study.events import Event
from tests.fakes import FAKE_H200, physical_landscape
from tests.search.conftest import GPT2, gpt2_space, make_policy
from tests.search.conftest import KNOBS as KNOBS_H200

# A 40 GiB fake GPU, where the larger micro-batches run out of memory.
SMALL = FAKE_H200.model_copy(update={"memory_total_gib": 40.0})
SMALL_TARGET = Target.from_fingerprint(SMALL)
KNOBS: dict[str, list[Any]] = {
    "micro_batch_size": [8, 16, 32, 64, 128, 256],
    "attention": ["flash", "cudnn", "efficient"],
    "checkpointing": ["none", "full"],
}
FIXED = {"precision": "bf16", "compile_mode": "default", "vocab_pad_multiple": 64}
SPACE = parse_space({"name": "memory-history", "knobs": KNOBS, "fixed": FIXED})
# Random configs, nothing but the sampler's: the first study runs some out of memory.
RANDOM = {
    "history_seeds": 0,
    "guided": False,
    "expert_seed": False,
    "neighbour_seeds": False,
    "remeasure_top": 0,
    "headroom_check": False,
    "early_stop_patience": 0,
}


def _first_study(db, run_study):
    landscape = physical_landscape(GPT2, KNOBS, fixed=FIXED, limit_gib=40.0, fingerprint=SMALL)
    return run_study(
        db,
        space=SPACE,
        landscape=landscape,
        target=SMALL_TARGET,
        sampler="random",
        trials=24,
        seed=5,
        options=RANDOM,
    )


def _created_now(db) -> Any:
    """The creation time of a study created now: what `before` is for a study starting now."""
    study_id = create_study(db, model=GPT2, space=SPACE, max_trials=1, options=StudyOptions())
    with db.session() as s:
        return StudyRepo(s).require(study_id).created_at


def test_a_config_an_earlier_study_ran_out_of_memory_on_is_screened_before_it_runs_again(
    db, run_study
) -> None:
    first, _, trials, _ = _first_study(db, run_study)
    ooms = [t for t in trials if t.state == "infeasible" and t.error_class == "oom"]
    assert ooms, "the first study ran nothing out of memory: nothing to carry"
    carried = earlier_memory(
        db, GPT2, SMALL_TARGET, gpus_per_trial=1, before=_created_now(db), limit=200
    )
    taught = {t.number for t in trials if t.state in ("complete", "infeasible")}
    assert {(c.study_id, c.number) for c in carried} == {(first.study_id, n) for n in taught}

    fresh = make_policy(SPACE, target=SMALL_TARGET)
    warm = make_policy(SPACE, target=SMALL_TARGET)
    warm.cost.carry(carried)
    for t in ooms:
        # The first study launched it: its uncalibrated model could not rule it out.
        assert fresh.screen(t.params, fresh.knobs(t.params)) is None
        prune = warm.screen(t.params, warm.knobs(t.params))
        assert prune is not None and prune.error_class in ("oom", "headroom"), prune
        assert "of them from earlier studies of this model on this GPU" in prune.message


def test_a_later_studys_expert_default_takes_the_micro_batch_the_earlier_trials_show_fits(
    db, run_study
) -> None:
    first, _, first_trials, _ = run_study(db, trials=12, seed=5)
    later, _, trials, rec = run_study(db, trials=12, seed=6)
    alone, _, alone_trials, _ = run_study(db, trials=12, seed=6, options={"memory_history": 0})

    def expert_mb(rows: list) -> int:
        return next(t.params["micro_batch_size"] for t in rows if t.purpose == "expert-default")

    # The prior is not sure 256 keeps the headroom; the first study's peaks say it does.
    assert expert_mb(first_trials) == expert_mb(alone_trials) == 128
    assert expert_mb(trials) == 256
    calibration = rec["cost_model"]["calibration"]
    assert calibration["carried_from"] == [first.study_id]
    assert calibration["carried"] == len(later.policy.cost.carried) > 0
    assert alone.policy.cost.carried == ()


def test_only_the_same_model_on_the_same_gpu_that_ended_before_the_study_counts(
    any_db, run_study
) -> None:
    db = any_db  # the cutoff compares stored times: on SQLite and on Postgres
    first, _, _, _ = run_study(db, trials=6, seed=5)
    h200 = Target.from_fingerprint(FAKE_H200)
    now = _created_now(db)

    def carried(model=GPT2, target=h200, gpus=1, before=now) -> int:
        found = earlier_memory(db, model, target, gpus_per_trial=gpus, before=before, limit=200)
        return len(found)

    assert carried() > 0
    assert carried(model=GPT2.model_copy(update={"seq_len": 512})) == 0
    assert carried(target=Target("cuda", 1, "NVIDIA A100-SXM4-80GB", (8, 0), 80.0)) == 0
    assert carried(target=Target("cpu", 0)) == 0
    assert carried(gpus=2) == 0
    with db.session() as s:
        created = StudyRepo(s).require(first.study_id).created_at
    # Its own trials ended after it was created: a restart of it reads the same as its start.
    assert carried(before=created) == 0
    assert len(earlier_memory(db, GPT2, h200, gpus_per_trial=1, before=now, limit=3)) == 3


def test_the_evidence_replays_the_memory_model_the_search_started_from(db, run_study) -> None:
    run_study(db, trials=12, seed=5)
    later, _, trials, rec = run_study(db, trials=12, seed=6)
    first_measured = next(t for t in trials if t.state == "complete")
    knobs = later.policy.knobs(first_measured.params)

    def predicted(cm: CostModel) -> float:
        return round(cm.predict(knobs).allocated_gib, 3)

    def model() -> CostModel:
        return CostModel(GPT2, num_gpus=1, on_cuda=True, limit_gib=later.policy.limit_gib)

    started = model()
    started.carry(later.policy.cost.carried)
    shown = rec["cost_model"]["trials"][0]
    assert shown["trial_number"] == first_measured.number
    assert shown["predicted_gib"] == predicted(started)
    assert shown["predicted_gib"] != predicted(model())  # not what a fresh model says


def test_earlier_evidence_comes_before_the_studys_own_or_not_at_all(db, run_study) -> None:
    run_study(db, trials=6, seed=5)
    h200 = Target.from_fingerprint(FAKE_H200)
    found = earlier_memory(db, GPT2, h200, gpus_per_trial=1, before=_created_now(db), limit=200)
    policy = make_policy(SPACE, target=h200)
    policy.cost.carry(())  # nothing carried: nothing changes, and the study's own may follow
    assert policy.cost.carried == () and not policy.cost.calibration.points
    own = found[0]
    policy.cost.observe(own.knobs, own.result)
    with pytest.raises(RuntimeError, match="before the study's own trials"):
        policy.cost.carry(found)


def test_the_watcher_is_told_what_the_memory_model_starts_from(db, run_study) -> None:
    _, _, trials, _ = run_study(db, trials=6, seed=5)
    events: list[Event] = []
    study_id = create_study(db, model=GPT2, space=gpt2_space(), max_trials=2, seed=6)
    landscape = physical_landscape(GPT2, KNOBS_H200, fixed={"vocab_pad_multiple": 64})
    executor = ReplayExecutor(
        landscape, list(KNOBS_H200), target=Target.from_fingerprint(FAKE_H200)
    )
    StudyRunner(db, study_id, executor, poll_s=0.0, on_event=events.append).run()
    said = [e.message for e in events if e.kind == "carried"]
    measured = sum(1 for t in trials if t.state == "complete" and t.purpose not in END_CHECKS)
    assert said == [
        f"the memory model starts calibrated on {measured} measured trials of 1 earlier study "
        "of this model on this GPU (memory_history)"
    ]
