"""The service's coordinator under faults that really happen, on real Postgres.

- a round that raises (a bug) does not kill the coordinator thread; `/healthz` says so within
  10 s and recovers when the rounds do;
- an unreachable cluster (every executor call fails for a while) is waited out: no study fails,
  every trial runs once;
- a study that fails stops launching at once, even in the round it failed in.

Every test ends by checking the invariants (tests/faults/invariants.py).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from autotuner.api.app import ServiceSettings, create_app
from autotuner.executors.base import ExecutorUnavailable
from autotuner.executors.replay import ReplayExecutor
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec, TrialConfig
from autotuner.storage.models import StudyStatus, TrialState
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import create_study
from autotuner.study.scheduler import Scheduler
from tests.fakes import synthetic_landscape
from tests.faults.invariants import check_invariants
from tests.service.conftest import KNOBS, REPLAY_SPACE, wait_for

pytestmark = pytest.mark.postgres

SPACE = parse_space(REPLAY_SPACE)
MODEL = ModelSpec.resolve({"preset": "tiny"})


class FlakyExecutor(ReplayExecutor):
    """A ReplayExecutor whose calls fail on demand: while `broken` is set, the calls named in
    `broken_calls` raise it (None: healthy)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.broken: BaseException | None = None
        self.broken_calls = {"collect", "free_slots", "submit"}
        self.failed_calls = 0

    def _maybe_fail(self, call: str) -> None:
        if self.broken is not None and call in self.broken_calls:
            self.failed_calls += 1
            raise self.broken

    def collect(self, timeout_s: float) -> Any:
        self._maybe_fail("collect")
        return super().collect(timeout_s)

    def free_slots(self, gpus_per_trial: int) -> int:
        self._maybe_fail("free_slots")
        return super().free_slots(gpus_per_trial)

    def submit(self, config: TrialConfig) -> str:
        self._maybe_fail("submit")
        return super().submit(config)


def _executor(slots: int = 2) -> FlakyExecutor:
    return FlakyExecutor(synthetic_landscape(KNOBS), list(KNOBS), slots=slots)


def _status(db: Database, study_id: str) -> str:
    with db.read() as s:
        return StudyRepo(s).require(study_id).status


def _scheduler(db: Database, executor: FlakyExecutor) -> Scheduler:
    return Scheduler(db, lambda: executor, owner="faults", poll_s=0.05, discover_s=0.2)


def test_a_round_that_raises_is_reported_by_healthz_and_the_thread_survives(
    pg_url: str,
) -> None:
    db = Database(pg_url)
    study_id = create_study(db, model=MODEL, space=SPACE, max_trials=8)
    executor = _executor()
    scheduler = _scheduler(db, executor)
    app = create_app(ServiceSettings(db_url=pg_url, coordinator=False, migrate=False))
    with TestClient(app) as client:
        app.state.scheduler = scheduler
        # The scheduler's own call, outside any study's guard: a bug in the round itself.
        executor.broken_calls = {"collect"}
        executor.broken = RuntimeError("a bug in a round")
        broke_at = time.monotonic()
        scheduler.start()
        try:
            wait_for(lambda: client.get("/healthz").status_code == 503, 10, "healthz to say 503")
            assert time.monotonic() - broke_at < 10
            health = client.get("/healthz").json()
            assert health["coordinator"]["state"] == "error"
            assert "a bug in a round" in health["coordinator"]["last_error"]
            assert health["coordinator"]["thread_alive"] is True
            executor.broken = None
            wait_for(lambda: client.get("/healthz").status_code == 200, 60, "healthz to recover")
            wait_for(lambda: _status(db, study_id) == StudyStatus.COMPLETED, 120, "the study")
        finally:
            scheduler.stop()
    check_invariants(db, study_id, max_trials=8)


def test_a_dead_coordinator_thread_makes_healthz_unhealthy(pg_url: str) -> None:
    db = Database(pg_url)
    executor = _executor()
    scheduler = _scheduler(db, executor)

    def die() -> None:
        raise SystemExit("killed")  # not an Exception: nothing in a round catches it

    scheduler.tick = die  # type: ignore[method-assign]
    app = create_app(ServiceSettings(db_url=pg_url, coordinator=False, migrate=False))
    with TestClient(app) as client:
        app.state.scheduler = scheduler
        scheduler.start()

        # The thread records the error and then exits: a read between the two sees 503 with
        # the thread still alive (a fresh-clone CI run did, 2026-12-06), so wait for both.
        def dead() -> bool:
            answer = client.get("/healthz")
            return answer.status_code == 503 and not answer.json()["coordinator"]["thread_alive"]

        wait_for(dead, 10, "healthz to say 503 with the thread dead")
        coordinator = client.get("/healthz").json()["coordinator"]
        assert coordinator["thread_alive"] is False and coordinator["state"] == "error"
        scheduler.stop()


def test_healthz_is_503_while_the_executor_cannot_start(pg_url: str) -> None:
    """An unreachable cluster at start (the executor cannot be made): /healthz said 200 for as
    long as it lasted, although no trial could run; it says 503 and why, then 200 once up."""
    db = Database(pg_url)
    executor = _executor()
    attempts = 0

    def make_executor() -> FlakyExecutor:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise ConnectionError("Ray head at 10.0.0.1:6379 unreachable")
        return executor

    scheduler = Scheduler(db, make_executor, owner="faults", poll_s=0.05, discover_s=0.2)
    app = create_app(ServiceSettings(db_url=pg_url, coordinator=False, migrate=False))
    with TestClient(app) as client:
        app.state.scheduler = scheduler
        scheduler.start()
        try:

            def unhealthy_saying_why() -> bool:
                answer = client.get("/healthz")
                error = answer.json()["coordinator"]["last_error"] or ""
                return answer.status_code == 503 and "unreachable" in error

            wait_for(unhealthy_saying_why, 10, "healthz to say 503 and why")
            # Retried at 1 s, then 2 s: the third attempt makes it.
            wait_for(lambda: client.get("/healthz").status_code == 200, 30, "healthz 200")
        finally:
            scheduler.stop()


def test_a_stuck_round_makes_healthz_unhealthy(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round that never ends (a cluster call that does not return): the thread is alive and
    its state says running, yet no study moves; /healthz says 503 and that it is stuck."""
    import threading

    from autotuner.study import scheduler as scheduler_module

    monkeypatch.setattr(scheduler_module, "STUCK_ROUND_S", 1.0)
    db = Database(pg_url)
    scheduler = _scheduler(db, _executor())
    release, rounds = threading.Event(), 0
    real_tick = scheduler.tick

    def tick() -> None:
        nonlocal rounds
        rounds += 1
        if rounds == 3:
            release.wait(30)  # stuck, until the test lets it go
        real_tick()

    scheduler.tick = tick  # type: ignore[method-assign]
    app = create_app(ServiceSettings(db_url=pg_url, coordinator=False, migrate=False))
    with TestClient(app) as client:
        app.state.scheduler = scheduler
        scheduler.start()
        try:

            def stuck() -> bool:
                answer = client.get("/healthz")
                error = answer.json()["coordinator"]["last_error"] or ""
                return answer.status_code == 503 and "stuck" in error

            wait_for(stuck, 10, "healthz to say the coordinator is stuck")
            release.set()
            wait_for(lambda: client.get("/healthz").status_code == 200, 10, "healthz 200")
        finally:
            release.set()
            scheduler.stop()


def test_an_unreachable_cluster_is_waited_out_and_no_study_fails(pg_url: str) -> None:
    db = Database(pg_url)
    ids = [create_study(db, model=MODEL, space=SPACE, max_trials=6, seed=i) for i in range(2)]
    executor = _executor()
    scheduler = _scheduler(db, executor)
    # Unreachable from the start: adopting the studies works (the database does), every
    # launch and collect fails until the cluster is back.
    executor.broken = ExecutorUnavailable("Ray: ConnectionError: head unreachable")
    scheduler.start()
    try:
        wait_for(lambda: executor.failed_calls >= 5, 10, "the executor to be called and fail")
        assert scheduler.status()["state"] == "cluster unavailable"
        assert not scheduler.status()["healthy"]  # /healthz: 503 while no trial can run
        time.sleep(1.0)  # an outage of a second or more, with calls failing all along
        executor.broken = None
        for study_id in ids:
            wait_for(lambda s=study_id: _status(db, s) == StudyStatus.COMPLETED, 120, "a study")
    finally:
        scheduler.stop()
    for study_id in ids:
        check_invariants(db, study_id, max_trials=6)


def test_a_failed_study_launches_nothing_more_in_the_same_round(pg_url: str) -> None:
    db = Database(pg_url)
    bad = create_study(db, model=MODEL, space=SPACE, max_trials=6)
    good = create_study(db, model=MODEL, space=SPACE, max_trials=6, seed=1)
    executor = _executor(slots=4)
    scheduler = _scheduler(db, executor)
    scheduler.executor = executor
    scheduler.tick()  # adopts both
    runner = scheduler._slots[bad].runner
    launches = 0
    real_launch = runner.launch

    def launch_then_fail(max_count: int | None = None) -> int:
        nonlocal launches
        launches += 1
        if launches == 2:
            raise RuntimeError("a bug while launching")
        return real_launch(max_count)

    runner.launch = launch_then_fail  # type: ignore[method-assign]
    for _ in range(400):
        scheduler.tick()
        if _status(db, good) == StudyStatus.COMPLETED and bad not in scheduler._slots:
            break
    assert launches == 2, "the failed study was asked to launch again"
    assert runner.done
    assert _status(db, bad) == StudyStatus.FAILED
    check_invariants(db, bad, max_trials=6)
    check_invariants(db, good, max_trials=6)


def test_cancelling_a_study_no_coordinator_runs_ends_its_running_trials(pg_url: str) -> None:
    from autotuner.study import cancel
    from autotuner.study.coordinator import StudyRunner

    db = Database(pg_url)
    study_id = create_study(db, model=MODEL, space=SPACE, max_trials=6)
    executor = _executor(slots=2)
    dead = StudyRunner(db, study_id, executor, owner="dead-coordinator", lease_ttl_s=0.2)
    dead.start()
    dead.step()
    assert dead.in_flight  # it dies here, with trials running and its lease about to expire
    time.sleep(0.5)
    view = cancel.cancel_study(db, study_id)
    assert view["status"] == StudyStatus.CANCELLED
    check_invariants(db, study_id, max_trials=6)
    with db.read() as s:
        study = StudyRepo(s).require(study_id)
        assert study.owner is None


def test_trials_a_coordinator_left_running_in_a_study_cancelled_under_it_are_ended(
    pg_url: str,
) -> None:
    """Cancelled while its coordinator held a live lease, which then died before it stopped
    its trials: once the lease expires, the service's discovery ends them (and so does a
    second `cancel`), rather than leaving them `running` in a cancelled study for good."""
    from autotuner.study import cancel, operations
    from autotuner.study.coordinator import StudyRunner

    db = Database(pg_url)
    for end_by in ("discovery", "cancel again"):
        study_id = create_study(db, model=MODEL, space=SPACE, max_trials=6)
        executor = _executor(slots=2)
        dead = StudyRunner(db, study_id, executor, owner="dead-coordinator", lease_ttl_s=1.0)
        dead.start()
        dead.step()
        assert dead.in_flight
        cancel.cancel_study(db, study_id)  # the lease is live: its holder should end them
        running = _trials_in(db, study_id, TrialState.RUNNING)
        assert running, "a live coordinator's trials were ended under it"
        with pytest.raises(operations.Conflict, match="already cancelled"):
            cancel.cancel_study(db, study_id)  # still live: nothing to end yet
        time.sleep(1.2)  # ... and the coordinator never comes back
        if end_by == "discovery":
            scheduler = _scheduler(db, executor)
            scheduler.executor = executor
            scheduler.tick()
        else:
            assert cancel.cancel_study(db, study_id)["status"] == StudyStatus.CANCELLED
        assert not _trials_in(db, study_id, TrialState.RUNNING), end_by
        with db.read() as s:
            ended = [TrialRepo(s).get(study_id, n) for n in running]
        assert all(t is not None and t.state == TrialState.FAILED for t in ended)
        assert all("cancelled with the study" in (t.error_message or "") for t in ended if t)
        check_invariants(db, study_id, max_trials=6)


def _trials_in(db: Database, study_id: str, state: TrialState) -> list[int]:
    with db.read() as s:
        return [t.number for t in TrialRepo(s).list(study_id) if t.state == state]
