"""The coordinator against a database link that fails at the worst moments (tests/faults/pgproxy).

- a result's COMMIT reaches the server but its acknowledgement is lost: the next round writes
  it again, finds it stored, and the study goes on (it used to fail the whole study);
- a dispatch's COMMIT is lost the same way: the running row it committed is reconciled and
  submitted, never duplicated by a second retry row;
- a coordinator cut off from the database for longer than its lease: another one takes the
  study over and finishes it; the first writes nothing more when its link comes back;
- two live coordinators with different ids contend for the same studies: each study is run by
  one of them at a time.

Each scenario runs 10 times in a row; each run ends with the invariant checks.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from autotuner.executors.replay import ReplayExecutor
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.models import StudyStatus
from autotuner.storage.session import Database, dispose_engines
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import create_study
from autotuner.study.scheduler import Scheduler
from tests.fakes import synthetic_landscape
from tests.faults.invariants import check_invariants
from tests.faults.pgproxy import PgProxy
from tests.service.conftest import KNOBS, REPLAY_SPACE, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]  # 10 runs of each fault: ~45 s

SPACE = parse_space(REPLAY_SPACE)
MODEL = ModelSpec.resolve({"preset": "tiny"})
RUNS = 10


@pytest.fixture
def proxy(pg_url: str) -> Iterator[PgProxy]:
    from sqlalchemy.engine import make_url

    url = make_url(pg_url)
    p = PgProxy(url.host or "127.0.0.1", url.port or 5432).start()
    yield p
    p.stop()
    dispose_engines()


def _executor(slots: int = 2) -> ReplayExecutor:
    return ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS), slots=slots)


def _scheduler(db: Database, owner: str, **kw: float) -> Scheduler:
    executor = _executor()
    scheduler = Scheduler(db, lambda: executor, owner=owner, poll_s=0.0, discover_s=0.0, **kw)
    scheduler.executor = executor
    return scheduler


def _status(db: Database, study_id: str) -> str:
    with db.read() as s:
        return StudyRepo(s).require(study_id).status


def _run_until_done(scheduler: Scheduler, db: Database, study_id: str, ticks: int = 2000) -> None:
    for _ in range(ticks):
        scheduler.tick()
        if _status(db, study_id) in (StudyStatus.COMPLETED, StudyStatus.FAILED):
            return
    raise AssertionError(f"study {study_id} not finished after {ticks} rounds")


@pytest.mark.parametrize(
    "statement",
    [b"UPDATE trials SET state", b"INSERT INTO trials"],
    ids=["result-commit", "dispatch-commit"],
)
def test_a_lost_commit_acknowledgement_neither_fails_nor_duplicates(
    pg_url: str, proxy: PgProxy, statement: bytes
) -> None:
    direct = Database(pg_url)
    through_proxy = Database(proxy.url(pg_url))
    for run in range(RUNS):
        study_id = create_study(direct, model=MODEL, space=SPACE, max_trials=6, seed=run)
        scheduler = _scheduler(through_proxy, owner=f"coordinator-{run}")
        scheduler.tick()  # adopt it and launch the first trials
        proxy.lose_commit_ack(after=statement)
        _run_until_done(scheduler, direct, study_id)
        assert proxy.acks_lost == run + 1, "the fault was not injected"
        assert _status(direct, study_id) == StudyStatus.COMPLETED
        check_invariants(direct, study_id, max_trials=6)


def test_a_coordinator_cut_off_past_its_lease_is_replaced_and_then_writes_nothing(
    pg_url: str, proxy: PgProxy
) -> None:
    direct = Database(pg_url)
    through_proxy = Database(proxy.url(pg_url))
    for run in range(RUNS):
        study_id = create_study(direct, model=MODEL, space=SPACE, max_trials=8, seed=run)
        a = _scheduler(through_proxy, owner=f"a-{run}", lease_ttl_s=0.5, heartbeat_interval_s=0.1)
        b = _scheduler(direct, owner=f"b-{run}", lease_ttl_s=5.0, heartbeat_interval_s=0.1)
        a.tick()  # A adopts the study and launches
        assert study_id in a._slots
        proxy.pause(2.0)  # A's link is dead for four lease lengths
        with direct.read() as s:
            launched_by_a = len(TrialRepo(s).list(study_id))
        deadline = time.monotonic() + 30
        while _status(direct, study_id) != StudyStatus.COMPLETED:
            assert time.monotonic() < deadline, "B did not finish the study"
            b.tick()  # B takes the expired lease, marks A's trials lost, and runs the study
        submitted_by_a = len(a.executor.submitted)  # type: ignore[union-attr]
        time.sleep(max(0.0, proxy._paused_until - time.monotonic()) + 0.1)
        for _ in range(20):  # A's link is back: it must notice and stop, writing nothing
            a.tick()
        assert study_id not in a._slots
        assert len(a.executor.submitted) == submitted_by_a  # type: ignore[union-attr]
        with direct.read() as s:
            study = StudyRepo(s).require(study_id)
            assert study.status == StudyStatus.COMPLETED and study.owner is None
            trials = TrialRepo(s).list(study_id)
        assert launched_by_a <= len(trials)
        check_invariants(direct, study_id, max_trials=8)
        proxy.reset()


def test_two_live_coordinators_share_studies_without_running_one_twice(pg_url: str) -> None:
    db = Database(pg_url)
    for run in range(RUNS):
        ids = [
            create_study(db, model=MODEL, space=SPACE, max_trials=5, seed=10 * run + i)
            for i in range(3)
        ]
        a, b = _scheduler(db, owner=f"a-{run}"), _scheduler(db, owner=f"b-{run}")

        def finished(ids: list[str] = ids) -> bool:
            return all(_status(db, i) == StudyStatus.COMPLETED for i in ids)

        def both_tick(a: Scheduler = a, b: Scheduler = b) -> bool:
            a.tick()
            b.tick()
            return finished()

        wait_for(both_tick, 60, "both coordinators to finish the studies", every_s=0.0)
        ran_a = {c.study_id for c in a.executor.submitted}  # type: ignore[union-attr]
        ran_b = {c.study_id for c in b.executor.submitted}  # type: ignore[union-attr]
        assert ran_a.isdisjoint(ran_b), "a study had trials launched by both coordinators"
        for study_id in ids:
            check_invariants(db, study_id, max_trials=5)
