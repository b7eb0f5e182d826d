"""Early stop of search trials: the coordinator's floor (replay executor, no GPU), and a trial
that stopped early never becoming the recommendation (live and final, on SQLite and Postgres)."""

from __future__ import annotations

import pytest

from autotuner.executors.replay import ReplayExecutor
from autotuner.options import StudyOptions
from autotuner.purpose import END_CHECKS, SEARCH_TRIALS, Purpose
from autotuner.search.early_stop import abandon_floor
from autotuner.search.objective import Objective
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec, TrialConfig, TrialResult
from autotuner.storage.models import StudyStatus, TrialState
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import StudyRunner, create_study
from autotuner.study.live import live_best
from autotuner.study.recommend import recommend
from tests.fakes import measured, synthetic_landscape

KNOBS = {
    "micro_batch_size": [4, 8, 16, 32, 64],
    "precision": ["fp32", "bf16"],
    "checkpointing": ["none", "full"],
}
SPACE = parse_space({"name": "early-stop", "knobs": KNOBS, "defaults": {"micro_batch_size": 16}})
MODEL = ModelSpec.resolve({"preset": "tiny"})


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest) -> Database:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    return Database(url)


def test_the_floor_is_far_below_the_incumbent_and_only_for_tokens_objectives() -> None:
    assert abandon_floor(Objective.TOKENS_PER_S, 1000.0, 0.01) == pytest.approx(750.0)
    assert abandon_floor(Objective.TOKENS_PER_S, 1000.0, 0.1) == pytest.approx(500.0)  # 5 x noise
    assert abandon_floor(Objective.TOKENS_PER_S, 1000.0, 0.25) is None  # nothing can be ruled out
    assert abandon_floor(Objective.TOKENS_PER_S, None, 0.01) is None  # nothing measured yet
    # Compile time is charged: a slower config that compiles faster can win.
    assert abandon_floor(Objective.TIME_TO_TRAIN, 1000.0, 0.01) is None


def test_a_study_can_measure_every_trial_in_full(sqlite_url: str) -> None:
    """options.stop_slow_trials off (a landscape recording): no trial gets a floor, none stops
    early, though the same study with it on stops some (the test below)."""
    db = Database(sqlite_url)
    options = StudyOptions(stop_slow_trials=False)
    study_id = create_study(db, model=MODEL, space=SPACE, max_trials=14, seed=1, options=options)
    StudyRunner(db, study_id, ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS))).run()
    with db.read() as s:
        trials = [t for t in TrialRepo(s).list(study_id) if t.state != TrialState.PRUNED]
    assert len(trials) >= 10  # the search's trials and the end checks, all in full
    for t in trials:
        assert TrialConfig.model_validate(t.config).measure.abandon_below_tokens_per_s is None
        assert not TrialResult.model_validate(t.result).stopped_early, t.number


def test_search_trials_get_the_floor_seeds_and_end_checks_never(db: Database) -> None:
    study_id = create_study(db, model=MODEL, space=SPACE, max_trials=14, seed=1)
    executor = ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS), slots=1)
    StudyRunner(db, study_id, executor, poll_s=0.0).run()
    with db.read() as s:
        study = StudyRepo(s).require(study_id)
        trials = TrialRepo(s).list(study_id)
        assert study.status == StudyStatus.COMPLETED
        rec = study.recommendation
    assert rec is not None
    floors: dict[str, list[float | None]] = {}
    stopped = []
    best_before = 0.0  # one slot: every trial was dispatched after the previous one finished
    for t in trials:
        if t.state == TrialState.PRUNED:
            continue
        floor = TrialConfig.model_validate(t.config).measure.abandon_below_tokens_per_s
        floors.setdefault(t.purpose, []).append(floor)
        result = TrialResult.model_validate(t.result)
        if t.purpose == "search" and best_before:
            # The synthetic landscape's repeats spread 1%: the margin is the minimum, 25%.
            assert floor == pytest.approx(0.75 * best_before), t.number
        if result.stopped_early:
            stopped.append(t)
            assert t.purpose == "search" and floor is not None
            assert result.tokens_per_s < floor and len(result.repeat_tokens_per_s) == 1
        elif t.state == TrialState.COMPLETE and t.purpose not in END_CHECKS:
            best_before = max(best_before, result.tokens_per_s or 0.0)
    seeds = floors[Purpose.EXPERT_DEFAULT] + floors.get("seed", [])
    assert seeds and all(f is None for f in seeds)
    ends = [f for purpose, fs in floors.items() if purpose not in SEARCH_TRIALS for f in fs]
    assert ends and all(f is None for f in ends)  # re-measurements and end checks run in full
    assert any(f is not None for f in floors["search"])
    # The landscape's fp32 and checkpointed small micro-batches run at < 75% of the best.
    assert stopped, "no search trial ran below the floor"
    never = {t.number for t in stopped}
    assert rec["trial_number"] not in never
    assert not never & set(rec["measured_trials"])
    assert not any(
        t.purpose == "remeasure" and t.params == s.params for t in trials for s in stopped
    )
    # The knob report still reads them: a config far below the best shows a knob matters.
    levels = {row["knob"]: set(row["levels"]) for row in rec["importance"]}
    for t in stopped:
        for knob, value in t.params.items():
            assert str(value) in levels[knob], (t.number, knob, value, levels[knob])


def _finish(db: Database, study_id: str, params: dict, result: TrialResult) -> int:
    with db.session() as s:
        repo = TrialRepo(s)
        row = repo.create_running(study_id, params=params, config={})
        repo.finish(row, TrialState.COMPLETE, result=result, objective_value=result.tokens_per_s)
        return row.number


def test_a_trial_that_stopped_early_is_never_the_recommendation(db: Database) -> None:
    study_id = create_study(db, model=MODEL, space=SPACE, max_trials=3)
    full = _finish(db, study_id, {"micro_batch_size": 8}, measured(1000.0))
    # Contrived (a real floor lies below the incumbent): faster, but one repeat only.
    fast_partial = measured(5000.0, stopped_early=True)
    _finish(db, study_id, {"micro_batch_size": 16}, fast_partial)
    live = live_best(db, study_id, Objective.TOKENS_PER_S)  # results deferred: the column
    assert live is not None and live["trial_number"] == full
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)  # results loaded
    assert [t.stopped_early for t in trials] == [False, True]  # the column finish wrote
    final = recommend(trials, Objective.TOKENS_PER_S)
    assert final is not None and final["trial_number"] == full and final["runner_up"] is None
