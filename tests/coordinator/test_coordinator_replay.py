"""The coordinator driven one step at a time against a ReplayExecutor (no GPU, no Ray)."""

from __future__ import annotations

import optuna
import pytest

from autotuner.executors.replay import ReplayExecutor
from autotuner.options import StudyOptions
from autotuner.purpose import SEARCH_TRIALS, Purpose
from autotuner.search.policy import Prune
from autotuner.search.space import parse_space
from autotuner.spec import Knobs, ModelSpec, canonical_params
from autotuner.storage.models import StudyStatus, TrialState
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import StudyRunner, create_study
from tests.fakes import FakeWorkerDeathReplay, synthetic_landscape

KNOBS = {
    "micro_batch_size": [4, 8, 16, 32, 64, 128],
    "precision": ["fp32", "bf16"],
    "checkpointing": ["none", "full"],
    "optimizer": ["adamw-foreach", "adamw-fused"],
}
SPACE = parse_space(
    {
        "name": "replay-test",
        "knobs": KNOBS,
        "fixed": {"attention": "efficient"},
        "defaults": {"micro_batch_size": 16, "precision": "bf16"},
        "rules": [
            {
                "if": {"checkpointing": ["full"]},
                "then": {"micro_batch_size": [32, 64, 128]},
                "why": "full checkpointing only pays off at large micro-batches",
            }
        ],
    }
)
MODEL = ModelSpec.resolve({"preset": "tiny"})


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest) -> Database:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    return Database(url)


def _runner(db: Database, *, trials: int, slots: int = 1, seed: int = 0):
    study_id = create_study(db, model=MODEL, space=SPACE, max_trials=trials, seed=seed)
    executor = ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS), slots=slots)
    return StudyRunner(db, study_id, executor, poll_s=0.0), executor


def test_first_trial_is_the_expert_default_and_budget_is_respected(db: Database) -> None:
    runner, executor = _runner(db, trials=12)
    runner.run()
    with db.session() as s:
        study = StudyRepo(s).require(runner.study_id)
        trials = TrialRepo(s).list(study.id)
        assert study.status == StudyStatus.COMPLETED
        launched = [t for t in trials if t.state != TrialState.PRUNED]
        assert len(launched) == 12 == len(executor.submitted)
        first = launched[0]
        assert first.purpose == Purpose.EXPERT_DEFAULT
        assert first.params["micro_batch_size"] == 16 and first.params["precision"] == "bf16"
        numbers = [t.number for t in trials]
        assert numbers == sorted(set(numbers)) == list(range(len(trials)))
        assert study.recommendation is not None
        best = max(t.objective_value or 0 for t in trials)
        assert study.recommendation["objective_value"] == best


def test_ruled_out_configs_never_launch(db: Database) -> None:
    runner, executor = _runner(db, trials=20)
    runner.run()
    for config in executor.submitted:
        k = config.knobs
        assert not (k.checkpointing == "full" and k.micro_batch_size < 32)
    with db.session() as s:
        pruned = TrialRepo(s).list(runner.study_id, states=[TrialState.PRUNED])
        # Besides the space's rule, the cost model prunes predicted OOMs (error_class "oom").
        ruled_out = [t for t in pruned if t.error_class == "unsupported"]
        assert all("large micro-batches" in (t.error_message or "") for t in ruled_out)


def test_oom_is_infeasible_and_no_config_runs_twice(db: Database) -> None:
    runner, executor = _runner(db, trials=30, slots=2)
    runner.run()
    # The top candidates are re-measured on purpose at the end (purpose "remeasure", after the
    # search); the search itself never runs a config twice.
    with db.session() as s:
        ends = ("remeasure", "headroom")  # and the winner's headroom check, after them
        remeasured = [t for t in TrialRepo(s).list(runner.study_id) if t.purpose in ends]
    searched = executor.submitted[: len(executor.submitted) - len(remeasured)]
    keys = [c.knobs.model_dump_json() for c in searched]
    assert len(keys) == len(set(keys))
    with db.session() as s:
        infeasible = TrialRepo(s).list(runner.study_id, states=[TrialState.INFEASIBLE])
        assert infeasible, "the landscape has OOM configs; a 30-trial search should meet one"
        assert {t.error_class for t in infeasible} == {"oom"}


def test_restart_resumes_without_losing_or_repeating(db: Database) -> None:
    runner, executor = _runner(db, trials=10)
    runner.start()
    while len(executor.submitted) < 4:
        runner.step()
    # The coordinator dies with a trial in flight: its row stays "running".
    assert runner.in_flight
    with db.session() as s:
        StudyRepo(s).release(runner.study_id, runner.owner)
    resumed = StudyRunner(db, runner.study_id, executor, poll_s=0.0)
    resumed.run()
    with db.session() as s:
        trials = TrialRepo(s).list(runner.study_id)
        lost = [t for t in trials if t.state == TrialState.LOST]
        assert len(lost) == 1 and lost[0].retried
        retry = [t for t in trials if t.retry_of == lost[0].number]
        # The retry ran the lost trial's config to an end (a result or a measured OOM).
        assert len(retry) == 1 and retry[0].params == lost[0].params
        assert retry[0].state in (TrialState.COMPLETE, TrialState.INFEASIBLE)
        launched = [t for t in trials if t.state != TrialState.PRUNED and t.retry_of is None]
        assert len(launched) == 10
        assert [t.number for t in trials] == list(range(len(trials)))


def test_the_expert_default_lost_in_a_restart_is_retried_as_the_expert_default(
    db: Database,
) -> None:
    """The coordinator dies while trial #0, the expert default, runs: the restarted one retries
    it as the expert default (the roles come back from the stored trials), so the
    recommendation still has its yardstick. It was labelled `search` before: a restarted
    coordinator plans no seeds."""
    runner, executor = _runner(db, trials=6)
    runner.start()
    while not executor.submitted:
        runner.step()
    assert runner.in_flight
    with db.session() as s:
        StudyRepo(s).release(runner.study_id, runner.owner)
    StudyRunner(db, runner.study_id, executor, poll_s=0.0).run()
    with db.session() as s:
        trials = TrialRepo(s).list(runner.study_id)
        rec = StudyRepo(s).require(runner.study_id).recommendation
    lost = trials[0]
    assert lost.state == TrialState.LOST and lost.purpose == Purpose.EXPERT_DEFAULT
    retry = next(t for t in trials if t.retry_of == 0)
    assert retry.purpose == Purpose.EXPERT_DEFAULT and retry.state == TrialState.COMPLETE
    assert rec is not None and rec["vs_expert_default"]["trial_number"] == retry.number


def test_a_seed_whose_worker_died_is_retried_with_its_own_config(db: Database) -> None:
    """The retry of the expert default (the first seed), while the other seeds wait: Optuna's
    ask pops the oldest waiting trial, and the retry once got the next seed's config, ran it
    unscreened as "the retry", and the expert default never ran again."""
    # A compile mode to vary: the expert default's alternative, a seed queued behind it.
    knobs = {**KNOBS, "compile_mode": ["default", "reduce-overhead"]}
    space = SPACE.model_copy(update={"knobs": knobs})
    study_id = create_study(db, model=MODEL, space=space, max_trials=8)
    executor = FakeWorkerDeathReplay(synthetic_landscape(knobs), list(knobs), die_on={1})
    runner = StudyRunner(db, study_id, executor, poll_s=0.0)
    runner.start()
    assert len(runner.policy.seed_roles) >= 2, "the test needs a seed behind the expert default"
    runner.run()
    with db.session() as s:
        trials = TrialRepo(s).list(study_id)
    first, retry = trials[0], trials[1]
    assert first.state == TrialState.FAILED and first.purpose == Purpose.EXPERT_DEFAULT
    assert retry.retry_of == first.number and retry.params == first.params
    assert retry.purpose == Purpose.EXPERT_DEFAULT  # the retry is the expert default too
    assert retry.state == TrialState.COMPLETE
    # The waiting seeds still ran, each once, after it.
    ran = [
        canonical_params(t.params)
        for t in trials
        if t.retry_of is None and t.purpose in SEARCH_TRIALS
    ]
    for seed in runner.policy.seed_roles:
        assert ran.count(seed) == 1


def test_the_retried_expert_default_is_still_the_recommendations_yardstick(db: Database) -> None:
    """Trial #0, the expert default, fails (its worker died) and #1, its retry, measures it:
    the recommendation compares the winner with #1. It once looked for trial #0 only and said
    the expert default "was not measured", while the global-batch entry named the retry."""
    study_id = create_study(db, model=MODEL, space=SPACE, max_trials=8)
    executor = FakeWorkerDeathReplay(synthetic_landscape(KNOBS), list(KNOBS), die_on={1})
    StudyRunner(db, study_id, executor, poll_s=0.0).run()
    with db.session() as s:
        trials = TrialRepo(s).list(study_id)
        rec = StudyRepo(s).require(study_id).recommendation
    first, retry = trials[0], trials[1]
    assert first.state == TrialState.FAILED and first.purpose == Purpose.EXPERT_DEFAULT
    assert retry.retry_of == 0 and retry.state == TrialState.COMPLETE
    assert rec is not None
    vs = rec["vs_expert_default"]
    assert vs["trial_number"] == 1, vs
    assert "not measured" not in vs["text"]
    assert vs["objective_value"] == retry.objective_value
    # A larger micro-batch wins, at another global batch: both entries name the retry.
    assert rec["trial_number"] != 1 and "x the expert default (trial #1," in vs["text"], vs
    expert_batch = rec["global_batch"]["expert_default"]
    assert expert_batch is not None and expert_batch["trial_number"] == vs["trial_number"]


def test_cancel_stops_the_study(db: Database) -> None:
    runner, _ = _runner(db, trials=50)
    runner.start()
    runner.step()
    with db.session() as s:
        StudyRepo(s).set_status(StudyRepo(s).require(runner.study_id), StudyStatus.CANCELLED)
    runner.step()
    assert runner.done
    with db.session() as s:
        assert StudyRepo(s).require(runner.study_id).status == StudyStatus.CANCELLED


def test_a_study_wanting_more_gpus_than_the_cluster_has_fails_with_the_fix(db: Database) -> None:
    study_id = create_study(db, model=MODEL, space=SPACE, max_trials=5, gpus_per_trial=4)
    executor = ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS), slots=2)
    runner = StudyRunner(db, study_id, executor, poll_s=0.0)
    runner.run()  # returns at once instead of waiting for GPUs that will never be free
    assert runner.done and not executor.submitted
    with db.session() as s:
        study = StudyRepo(s).require(study_id)
        assert study.status == StudyStatus.FAILED and study.owner is None
        assert "asks for 4 GPUs but the cluster has 2" in (study.error_message or "")
        assert "--gpus 2" in (study.error_message or "")


def test_a_remeasurement_lost_in_a_restart_is_not_retried(db: Database) -> None:
    runner, executor = _runner(db, trials=12)  # 12: the last 2 go to re-measurement
    runner.start()
    while not any(f.purpose == "remeasure" for f in runner.in_flight.values()):
        assert not runner.done, "the study should reach its re-measurement phase"
        runner.step()
    lost_number = next(iter(runner.in_flight.values())).number
    with db.session() as s:  # the coordinator dies here, its re-measurement in flight
        StudyRepo(s).release(runner.study_id, runner.owner)
    StudyRunner(db, runner.study_id, executor, poll_s=0.0).run()
    with db.session() as s:
        trials = TrialRepo(s).list(runner.study_id)
        lost = [t for t in trials if t.number == lost_number]
        assert lost[0].state == TrialState.LOST and lost[0].purpose == "remeasure"
        assert not [t for t in trials if t.retry_of == lost_number]
        assert StudyRepo(s).require(runner.study_id).status == StudyStatus.COMPLETED


@pytest.mark.parametrize("guided", [False, True])
def test_hooks_change_the_seeds_the_screen_and_the_sampler(db: Database, guided: bool) -> None:
    """The replay benchmark's injection points: what is enqueued first, an extra screen before
    the policy's (the throughput model's proposals pass it too), and a wrapped sampler."""
    study_id = create_study(
        db, model=MODEL, space=SPACE, max_trials=8, options=StudyOptions(guided=guided)
    )
    executor = ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS))
    seen: list[list[dict]] = []
    wrapped: list[optuna.samplers.BaseSampler] = []

    def seeds(params: list[dict]) -> list[dict]:
        seen.append(params)
        return [{**params[0], "optimizer": "adamw-foreach"}]

    def no_fp32(params: dict, knobs: Knobs) -> Prune | None:
        return Prune("unsupported", "no fp32 here", 1.0) if params["precision"] == "fp32" else None

    def wrap(inner: optuna.samplers.BaseSampler) -> optuna.samplers.BaseSampler:
        wrapped.append(inner)
        return inner

    runner = StudyRunner(
        db, study_id, executor, poll_s=0.0, seeds=seeds, screen=no_fp32, wrap_sampler=wrap
    )
    runner.run()
    assert seen and seen[0][0]["micro_batch_size"] == 16  # the policy's expert default
    assert wrapped == [runner.optuna.sampler]
    assert all(c.knobs.precision != "fp32" for c in executor.submitted)
    with db.session() as s:
        trials = TrialRepo(s).list(study_id)
    first = next(t for t in trials if t.state != TrialState.PRUNED)
    assert first.params["optimizer"] == "adamw-foreach"
    if not guided:  # the sampler proposes fp32 and the hook prunes it
        assert any(t.error_message == "no fp32 here" for t in trials)


def test_a_grid_study_ends_when_its_grid_is_visited(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every grid point proposed once (measured or pruned), then the search is over: no grid
    point asked for again, so Optuna never warns that it re-evaluates one."""
    db = Database(sqlite_url)
    study_id = create_study(
        db, model=MODEL, space=SPACE, max_trials=500, sampler="grid", seed=3,
        options=StudyOptions(expert_seed=False, neighbour_seeds=False, guided=False),
    )  # fmt: skip
    runner = StudyRunner(db, study_id, ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS)))
    with caplog.at_level("WARNING", logger="optuna"):
        runner.run()
    with db.read() as s:
        study = StudyRepo(s).require(study_id)
        trials = TrialRepo(s).list(study_id)
    grid = 6 * 2 * 2 * 2
    searched = [t for t in trials if t.purpose in SEARCH_TRIALS and t.retry_of is None]
    assert len({tuple(sorted(t.params.items())) for t in searched}) == len(searched) == grid
    assert study.status == StudyStatus.COMPLETED
    assert "search space exhausted" in (study.recommendation or {}).get("stopped", "")
    assert not [r for r in caplog.records if "re-evaluating" in r.getMessage()]


def _die_while_running(db: Database, runner: StudyRunner, executor: ReplayExecutor) -> StudyRunner:
    """The coordinator dies (kill -9) with a trial in flight; a new one takes the study over
    and dispatches what it owes (the lost trial's re-run), then is the next to die."""
    assert runner.in_flight
    with db.session() as s:
        StudyRepo(s).release(runner.study_id, runner.owner)
    resumed = StudyRunner(db, runner.study_id, executor, poll_s=0.0)
    resumed.start()
    while not resumed.in_flight:
        resumed.step()
    return resumed


def test_the_expert_default_lost_twice_is_run_again_without_spending_its_retry(
    db: Database,
) -> None:
    """Two kill -9 of the service while the expert default ran: #0 lost, its re-run #1 lost.
    Neither was the config's failure, so neither spends its one retry: #2 runs it and measures
    it (it was `attempt 2` before, and a lost attempt 2 was never run again: `best` said the
    expert default was not measured)."""
    runner, executor = _runner(db, trials=4)
    runner.start()
    while not runner.in_flight:
        runner.step()
    for _ in range(2):
        runner = _die_while_running(db, runner, executor)
    while not runner.done:
        runner.step()
    with db.session() as s:
        trials = TrialRepo(s).list(runner.study_id)
        rec = StudyRepo(s).require(runner.study_id).recommendation
    assert [t.state for t in trials[:2]] == [TrialState.LOST, TrialState.LOST]
    rerun = trials[2]
    assert (rerun.retry_of, rerun.attempt, rerun.purpose) == (1, 1, Purpose.EXPERT_DEFAULT)
    assert rerun.state == TrialState.COMPLETE
    assert rec is not None and rec["vs_expert_default"]["trial_number"] == rerun.number
    first_attempts = [t for t in trials if t.retry_of is None and t.state != TrialState.PRUNED]
    assert len(first_attempts) == 4  # the re-runs cost the budget nothing


def test_a_config_lost_three_times_in_a_row_is_then_a_crash_with_its_retry(
    db: Database,
) -> None:
    """The bound against a crash loop (study/lost.py): a config whose trial takes the service
    down every time it runs is, at its third loss in a row, a crash of the config, said so, and
    gets the one retry of a crash, no more."""
    from autotuner.study.lost import LOST_LIMIT

    runner, executor = _runner(db, trials=4)
    runner.start()
    while not runner.in_flight:
        runner.step()
    for _ in range(LOST_LIMIT):
        runner = _die_while_running(db, runner, executor)
    while not runner.done:
        runner.step()
    with db.session() as s:
        trials = TrialRepo(s).list(runner.study_id)
    assert [t.state for t in trials[: LOST_LIMIT - 1]] == [TrialState.LOST] * (LOST_LIMIT - 1)
    charged = trials[LOST_LIMIT - 1]
    assert charged.state == TrialState.FAILED and charged.error_class == "crash"
    assert f"lost {LOST_LIMIT} times in a row" in (charged.error_message or "")
    retry = trials[LOST_LIMIT]
    assert (retry.retry_of, retry.attempt) == (charged.number, 2)
    assert retry.state == TrialState.COMPLETE


def test_a_multi_gpu_study_on_a_cluster_without_gpus_fails_rather_than_run_one_process(
    db: Database,
) -> None:
    """Issue 42: `--gpus 4` where there is no GPU ran one CPU process and kept 4 on the study;
    submitted to a bare database, it fails at its start with the fix, nothing launched."""
    from autotuner.executors.base import Target

    study_id = create_study(db, model=MODEL, space=SPACE, max_trials=5, gpus_per_trial=4)
    cpu = Target("cpu", 0)
    executor = ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS), slots=1, target=cpu)
    runner = StudyRunner(db, study_id, executor, poll_s=0.0)
    runner.run()
    assert runner.done and not executor.submitted
    with db.session() as s:
        study = StudyRepo(s).require(study_id)
        assert study.status == StudyStatus.FAILED
        assert "asks for 4 GPUs but the cluster has 0; resubmit with --gpus 1" in (
            study.error_message or ""
        )


def test_a_gpu_study_resumed_where_there_is_no_gpu_stays_interrupted(db: Database) -> None:
    """`autotuner resume` of a GPU study on a machine without one says where to resume it and
    leaves it interrupted (not queued under this process's lease for a service to adopt)."""
    from autotuner.cli.tune import run_here
    from autotuner.executors.base import Target
    from autotuner.inputs import UserError
    from autotuner.study.resume import resume_study

    study_id = create_study(db, model=MODEL, space=SPACE, max_trials=5, device_type="cuda")
    with db.session() as s:
        StudyRepo(s).set_status(StudyRepo(s).require(study_id), StudyStatus.INTERRUPTED)
    executor = ReplayExecutor(
        synthetic_landscape(KNOBS), list(KNOBS), slots=1, target=Target("cpu", 0)
    )
    resume_study(db, study_id, owner="resumer")
    with pytest.raises(UserError, match="runs on GPUs and this cluster has none"):
        run_here(db, study_id, executor, "resumer", 5, True)
    with db.session() as s:
        study = StudyRepo(s).require(study_id)
        assert (study.status, study.owner) == (StudyStatus.INTERRUPTED, None)
    assert not executor.submitted
