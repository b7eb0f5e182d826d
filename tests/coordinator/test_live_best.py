"""The recommendation stored on the study after each finished trial is the one computed from
every trial at that moment; at the end, the final one (with its evidence) replaces it."""

from __future__ import annotations

import json

from autotuner.executors.replay import ReplayExecutor
from autotuner.search.objective import Objective
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.models import Study, TrialState
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study import operations
from autotuner.study.coordinator import StudyRunner, create_study
from autotuner.study.recommend import recommend
from tests.fakes import synthetic_landscape

KNOBS = {"micro_batch_size": [8, 16, 32, 64, 128], "precision": ["fp32", "bf16"]}


def test_the_stored_recommendation_follows_every_finished_trial(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    space = parse_space({"name": "live", "knobs": KNOBS})
    study_id = create_study(
        db, model=ModelSpec.resolve({"preset": "tiny"}), space=space, max_trials=10
    )
    runner = StudyRunner(db, study_id, ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS)))
    runner.poll_s = 0
    runner.start()
    checked, finished_before = 0, 0
    while not runner.done:
        runner.step()
        if runner.done:
            break
        with db.read() as s:
            trials = TrialRepo(s).list(study_id)
            stored = s.get(Study, study_id)
            assert stored is not None
        finished = sum(1 for t in trials if t.state == TrialState.COMPLETE)
        expected = recommend(trials, Objective.TOKENS_PER_S)
        # As JSON: what a reader gets either way.
        assert stored.recommendation == json.loads(json.dumps(expected)), len(trials)
        assert stored.best_trial_number == (expected or {}).get("trial_number")
        checked += finished > finished_before
        finished_before = finished
    assert checked >= 5  # it was compared after several finished trials, not just at the end
    best = operations.get_best(db, study_id)["best"]
    assert best is not None and "importance" in best  # the final one, with its evidence
