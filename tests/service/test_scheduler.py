"""The service's scheduler driven one tick at a time: many studies over one shared executor."""

from __future__ import annotations

import pytest

from autotuner.executors.replay import ReplayExecutor
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.models import StudyStatus, TrialState
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import StudyRunner, create_study
from autotuner.study.scheduler import Scheduler
from autotuner.types import utcnow
from tests.fakes import synthetic_landscape
from tests.polling import wait_for
from tests.service.conftest import KNOBS, REPLAY_SPACE

pytestmark = pytest.mark.postgres

SPACE = parse_space(REPLAY_SPACE)
MODEL = ModelSpec.resolve({"preset": "tiny"})


def _scheduler(db: Database, slots: int) -> tuple[Scheduler, ReplayExecutor]:
    executor = ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS), slots=slots)
    scheduler = Scheduler(db, lambda: executor, owner="test-scheduler", poll_s=0.0, discover_s=0.0)
    scheduler.executor = executor
    return scheduler, executor


def _run(scheduler: Scheduler, study_ids: list[str], db: Database, max_ticks: int = 500) -> None:
    for _ in range(max_ticks):
        scheduler.tick()
        with db.session() as s:
            statuses = {StudyRepo(s).require(i).status for i in study_ids}
        if statuses <= {StudyStatus.COMPLETED, StudyStatus.CANCELLED}:
            return
    raise AssertionError(f"studies not finished after {max_ticks} ticks: {statuses}")


def _lease_expired(db: Database, study_id: str) -> bool:
    with db.session() as s:
        expires = StudyRepo(s).require(study_id).lease_expires_at
    return expires is not None and expires < utcnow()


def test_free_slots_go_round_robin_across_studies(pg_url: str) -> None:
    db = Database(pg_url)
    ids = [create_study(db, model=MODEL, space=SPACE, max_trials=6, seed=i) for i in range(3)]
    scheduler, executor = _scheduler(db, slots=2)
    _run(scheduler, ids, db)
    order = [c.study_id for c in executor.submitted]
    # Each study gets a slot before any study gets a second one, round after round.
    for start in range(0, 12, 3):
        assert len(set(order[start : start + 3])) == 3, order
    with db.session() as s:
        for study_id in ids:
            trials = TrialRepo(s).list(study_id)
            assert [t.number for t in trials] == list(range(len(trials)))
            launched = [t for t in trials if t.state != TrialState.PRUNED]
            assert len(launched) == 6
            assert StudyRepo(s).require(study_id).status == StudyStatus.COMPLETED


def test_concurrency_never_exceeds_the_executors_slots(pg_url: str) -> None:
    db = Database(pg_url)
    ids = [create_study(db, model=MODEL, space=SPACE, max_trials=5, seed=i) for i in range(4)]
    scheduler, executor = _scheduler(db, slots=3)
    peak = 0
    for _ in range(300):
        scheduler.tick()
        peak = max(peak, len(executor.running()))
        if not scheduler._slots and _ == 0:
            continue
        with db.session() as s:
            if all(StudyRepo(s).require(i).status == StudyStatus.COMPLETED for i in ids):
                break
    assert peak == 3
    assert len(executor.submitted) == 20


def test_a_study_left_running_by_a_dead_coordinator_is_resumed(pg_url: str) -> None:
    db = Database(pg_url)
    study_id = create_study(db, model=MODEL, space=SPACE, max_trials=6)
    executor = ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS), slots=1)
    dead = StudyRunner(db, study_id, executor, owner="dead-coordinator", lease_ttl_s=0.1)
    dead.start()
    while len(executor.submitted) < 3:
        dead.step()
    assert dead.in_flight  # it dies with a trial in flight, its lease soon expired
    scheduler, _ = _scheduler(db, slots=2)
    wait_for(lambda: _lease_expired(db, study_id), 10, "the dead coordinator's lease to expire")
    _run(scheduler, [study_id], db)
    with db.session() as s:
        trials = TrialRepo(s).list(study_id)
        lost = [t for t in trials if t.state == TrialState.LOST]
        assert len(lost) == 1 and lost[0].retried
        assert [t.retry_of for t in trials if t.retry_of is not None] == [lost[0].number]
        assert [t.number for t in trials] == list(range(len(trials)))
        assert StudyRepo(s).require(study_id).owner is None  # released when finished


def test_a_cancelled_study_stops_and_the_others_go_on(pg_url: str) -> None:
    db = Database(pg_url)
    keep = create_study(db, model=MODEL, space=SPACE, max_trials=6)
    stop = create_study(db, model=MODEL, space=SPACE, max_trials=6, seed=1)
    scheduler, _ = _scheduler(db, slots=1)
    scheduler.tick()
    with db.session() as s:
        StudyRepo(s).set_status(StudyRepo(s).require(stop), StudyStatus.CANCELLED)
    _run(scheduler, [keep, stop], db)
    with db.session() as s:
        assert StudyRepo(s).require(stop).status == StudyStatus.CANCELLED
        assert StudyRepo(s).require(keep).status == StudyStatus.COMPLETED
        assert not TrialRepo(s).list(stop, states=[TrialState.RUNNING])


def test_a_drained_study_is_interrupted_and_runs_again_only_once_resumed(pg_url: str) -> None:
    """A graceful stop (the service's drain) cancels the trials in flight and stores the study
    `interrupted`, nothing left running (issue 42: a trial stayed `running`); a scheduler never
    adopts it on its own, and once resumed it runs to its budget, the cancelled trials again."""
    from autotuner.study.resume import resume_study

    db = Database(pg_url)
    study_id = create_study(db, model=MODEL, space=SPACE, max_trials=6)
    draining, _ = _scheduler(db, slots=2)
    draining.tick()  # adopts the study and fills both slots
    assert len(draining._slots[study_id].runner.in_flight) == 2
    draining._shutdown()  # what its thread runs as `stop()` ends it
    with db.session() as s:
        study = StudyRepo(s).require(study_id)
        assert (study.status, study.owner) == (StudyStatus.INTERRUPTED, None)
        trials = TrialRepo(s).list(study_id)
        assert not [t for t in trials if t.state == TrialState.RUNNING]
        cancelled = [t.number for t in trials if t.error_class == "interrupted"]
        assert len(cancelled) == 2 and all(
            t.state == TrialState.LOST for t in trials if t.number in cancelled
        )
    later, _ = _scheduler(db, slots=2)
    for _ in range(5):
        later.tick()
    assert study_id not in later._slots
    with db.session() as s:
        assert StudyRepo(s).require(study_id).status == StudyStatus.INTERRUPTED
    assert resume_study(db, study_id)["status"] == StudyStatus.QUEUED
    _run(later, [study_id], db)
    with db.session() as s:
        trials = TrialRepo(s).list(study_id)
        assert StudyRepo(s).require(study_id).status == StudyStatus.COMPLETED
        launched = [t for t in trials if t.state != TrialState.PRUNED and t.retry_of is None]
        assert len(launched) == 6
        assert sorted(t.retry_of for t in trials if t.retry_of in cancelled) == cancelled
