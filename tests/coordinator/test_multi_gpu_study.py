"""A multi-GPU study end to end on the replay executor: the multi-GPU knobs are searched, the
study ends with its best config on one GPU, and the recommendation states the scaling."""

from __future__ import annotations

from autotuner.executors.base import Target
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.models import TrialState
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import StudyRunner, create_study
from tests.fakes import FakeMultiGpuReplay, synthetic_landscape

SINGLE = {"micro_batch_size": [8, 16, 32], "precision": ["bf16", "fp32"]}
SPACE = parse_space(
    {
        "name": "ddp-test",
        "knobs": {**SINGLE, "parallel": ["ddp", "fsdp2"], "ddp_bucket_cap_mb": [25, 100]},
        "fixed": {"attention": "math", "compile_mode": "none"},
    }
)
TWO_GPUS = Target("cuda", 2, "replay", (9, 0), 80.0)


def test_a_two_gpu_study_reports_its_scaling_against_one_gpu(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    model = ModelSpec.resolve({"preset": "tiny"})
    study_id = create_study(db, model=model, space=SPACE, max_trials=16, gpus_per_trial=2)
    executor = FakeMultiGpuReplay(
        synthetic_landscape(SINGLE), list(SINGLE), slots=1, target=TWO_GPUS, scaling=0.9
    )
    runner = StudyRunner(db, study_id, executor, poll_s=0.0, heartbeat_interval_s=3600)
    runner.run()
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
        rec = StudyRepo(s).require(study_id).recommendation
    references = [t for t in trials if t.purpose == "reference"]
    assert len(references) == 1, [t.purpose for t in trials]
    ref = references[0]
    # Last but for the headroom check of the winner, which runs on the study's 2 GPUs.
    after = [t.purpose for t in trials if t.number > ref.number]
    assert ref.state == TrialState.COMPLETE and after == ["headroom"], after
    assert ref.config["num_gpus"] == 1 and ref.config["knobs"]["parallel"] == "ddp"
    assert ref.config["knobs"]["ddp_bucket_cap_mb"] == 25  # multi-GPU knobs at their defaults
    assert all(t.config["num_gpus"] == 2 for t in trials if t.purpose != "reference")
    assert rec is not None and rec["trial_number"] != ref.number  # never the winner itself
    scaling = rec["scaling"]
    assert scaling["gpus"] == 2 and scaling["reference_trial"] == ref.number
    assert abs(scaling["efficiency"] - 0.9) < 0.03, scaling
    assert "scaling on 2 GPUs" in scaling["text"]
    launched = [t for t in trials if t.state != TrialState.PRUNED and t.retry_of is None]
    assert len(launched) <= 16  # the reference is part of the budget


def test_a_single_gpu_study_has_no_reference(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    model = ModelSpec.resolve({"preset": "tiny"})
    space = parse_space({"name": "one", "knobs": SINGLE, "fixed": {"attention": "math"}})
    study_id = create_study(db, model=model, space=space, max_trials=8)
    executor = FakeMultiGpuReplay(synthetic_landscape(SINGLE), list(SINGLE), slots=1)
    StudyRunner(db, study_id, executor, poll_s=0.0, heartbeat_interval_s=3600).run()
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
        rec = StudyRepo(s).require(study_id).recommendation
    assert not [t for t in trials if t.purpose == "reference"]
    assert rec is not None and "scaling" not in rec
