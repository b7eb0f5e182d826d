"""StudyRepo and TrialRepo, each test on both backends (SQLite and Postgres, see conftest)."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import pytest

from autotuner.options import StudyOptions
from autotuner.spec import (
    FailureClass,
    Fingerprint,
    Telemetry,
    TrialResult,
    TrialStatus,
)
from autotuner.storage import (
    Database,
    Study,
    StudyNotFound,
    StudyRepo,
    StudyStatus,
    Trial,
    TrialAlreadyFinished,
    TrialRepo,
    TrialState,
)

MakeStudy = Callable[..., Study]
FINGERPRINT = Fingerprint(
    device_type="cuda",
    device_name="NVIDIA H200",
    device_count=1,
    compute_capability="9.0",
    memory_total_gib=139.8,
    driver="570.86",
    cuda="12.8",
    torch="2.8.0",
    python="3.11.9",
    hostname="gpu-7",
)


def _result(tokens_per_s: float = 1000.0) -> TrialResult:
    return TrialResult(
        status=TrialStatus.OK,
        tokens_per_s=tokens_per_s,
        tokens_per_s_min=tokens_per_s * 0.98,
        tokens_per_s_max=tokens_per_s * 1.01,
        tokens_per_s_per_gpu=tokens_per_s,
        repeat_tokens_per_s=[tokens_per_s * 0.98, tokens_per_s, tokens_per_s * 1.01],
        mfu=0.4123456789,
        peak_mem_gib=12.5,
        compile_s=31.25,
        loss_first=10.4,
        loss_last=9.9,
        fingerprint=FINGERPRINT,
        telemetry=Telemetry(samples=12, power_mean_w=512.5, throttle_reasons=["sw_power_cap"]),
        notes=["µ-batch 8 ✓"],
    )


def _run(db: Database, study_id: str, **kwargs: Any) -> Trial:
    with db.session() as session:
        return TrialRepo(session).create_running(
            study_id, params={"micro_batch_size": 4}, config={"num_gpus": 1}, **kwargs
        )


# --------------------------------------------------------------------------- studies


def test_create_study(db: Database, make_study: MakeStudy) -> None:
    study = make_study(name="gpt2 on h200", options=StudyOptions(usd_per_gpu_hour=3.5))
    assert study.id.startswith("st-") and len(study.id) == 11
    int(study.id[3:], 16)
    with db.session() as session:
        loaded = StudyRepo(session).get(study.id)
        assert loaded is not None
        assert loaded.status == StudyStatus.QUEUED
        assert (loaded.objective, loaded.sampler, loaded.seed, loaded.gpus_per_trial) == (
            "tokens_per_s",
            "tpe",
            0,
            1,
        )
        assert loaded.options == StudyOptions(usd_per_gpu_hour=3.5)
        assert loaded.model_spec == {"preset": "tiny"}
        assert loaded.created_at.tzinfo == dt.UTC
        assert loaded.owner is None and loaded.recommendation is None


def test_get_by_id_prefix_or_newest_name(db: Database, make_study: MakeStudy) -> None:
    older = make_study(name="sweep")
    newer = make_study(name="sweep")
    with db.session() as session:
        repo = StudyRepo(session)
        assert repo.get(older.id) is not None and repo.get(older.id).id == older.id  # type: ignore[union-attr]
        assert repo.get("sweep").id == newer.id  # type: ignore[union-attr]
        assert repo.get(newer.id[:7]).id == newer.id  # type: ignore[union-attr]
        assert repo.get(newer.id[3:9]).id == newer.id, "the st- prefix is optional"  # type: ignore[union-attr]
        assert repo.get("st-") is None and repo.get("st-a") is None, "too short to be an id"
        assert repo.get("nothing-like-it") is None


def test_ambiguous_prefix_is_not_a_match(db: Database, make_study: MakeStudy) -> None:
    a, b = make_study(), make_study()
    # Force a shared prefix by renaming ids (allowed: nothing references them yet).
    with db.session() as session:
        session.get(Study, a.id).id = "st-abcd0001"  # type: ignore[union-attr]
        session.get(Study, b.id).id = "st-abcd0002"  # type: ignore[union-attr]
    with db.session() as session:
        repo = StudyRepo(session)
        assert repo.get("abcd") is None
        with pytest.raises(StudyNotFound, match=r"ambiguous \(st-abcd0001, st-abcd0002"):
            repo.require("abcd")
        assert repo.require("abcd0002").id == "st-abcd0002"


def test_require_says_how_to_list_studies(db: Database) -> None:
    with db.session() as session, pytest.raises(StudyNotFound, match="autotuner status"):
        StudyRepo(session).require("st-00000000")


def test_list_newest_first_and_by_status(db: Database, make_study: MakeStudy) -> None:
    first, second, third = make_study(name="a"), make_study(name="b"), make_study(name="c")
    with db.session() as session:
        repo = StudyRepo(session)
        repo.set_status(repo.require(second.id), StudyStatus.RUNNING)
        assert [s.id for s in repo.list()] == [third.id, second.id, first.id]
        assert [s.id for s in repo.list(limit=2)] == [third.id, second.id]
        assert [s.id for s in repo.list(status="running")] == [second.id]
        assert [s.id for s in repo.list(status=StudyStatus.QUEUED)] == [third.id, first.id]


def test_set_status_stamps_times(db: Database, make_study: MakeStudy) -> None:
    study = make_study()
    with db.session() as session:
        StudyRepo(session).set_status(study, StudyStatus.RUNNING)
    started = study.started_at
    assert study.status == "running" and started is not None and study.finished_at is None
    with db.session() as session:
        StudyRepo(session).set_status(study, StudyStatus.RUNNING)  # a resumed study
        StudyRepo(session).set_status(study, StudyStatus.FAILED, error_message="every trial: infra")
    with db.session() as session:
        loaded = StudyRepo(session).require(study.id)
        assert loaded.status == StudyStatus.FAILED
        assert loaded.started_at == started, "started_at is the first start"
        assert loaded.finished_at is not None and loaded.finished_at >= started
        assert loaded.error_message == "every trial: infra"


def test_set_best(db: Database, make_study: MakeStudy) -> None:
    study = make_study()
    with db.session() as session:
        StudyRepo(session).set_best(study, 3, {"knobs": {"micro_batch_size": 8}})
    with db.session() as session:
        loaded = StudyRepo(session).require(study.id)
        assert loaded.best_trial_number == 3
        assert loaded.recommendation == {"knobs": {"micro_batch_size": 8}}
        StudyRepo(session).set_best(loaded, None, None)
    with db.session() as session:
        assert StudyRepo(session).require(study.id).recommendation is None


# --------------------------------------------------------------------------- lease


def test_lease_acquire_renew_release(db: Database, make_study: MakeStudy) -> None:
    study = make_study()
    with db.session() as session:
        repo = StudyRepo(session)
        assert repo.try_acquire(study.id, "coord-a", ttl_s=60)
        assert repo.try_acquire(study.id, "coord-a", ttl_s=60), "the owner may re-acquire"
        assert not repo.try_acquire(study.id, "coord-b", ttl_s=60)
        assert repo.renew(study.id, "coord-a", ttl_s=60)
        assert not repo.renew(study.id, "coord-b", ttl_s=60)
        loaded = repo.require(study.id)
        assert loaded.owner == "coord-a"
        assert loaded.lease_expires_at is not None
        assert loaded.lease_expires_at > dt.datetime.now(dt.UTC) + dt.timedelta(seconds=50)
        repo.release(study.id, "coord-b")  # not the owner: no effect
        assert repo.require(study.id).owner == "coord-a"
        repo.release(study.id, "coord-a")
        assert repo.require(study.id).owner is None
        assert repo.try_acquire(study.id, "coord-b", ttl_s=60)
    assert not _acquire(db, "st-missing", "coord-a")


def test_over_long_values_are_refused_on_every_backend(db: Database, make_study: MakeStudy) -> None:
    with pytest.raises(ValueError, match="over 200; use a shorter name"):
        make_study(name="x" * 201)
    study = make_study()
    with pytest.raises(ValueError, match=r"lease owner .* over 64; use a shorter owner id"):
        _acquire(db, study.id, "h" * 60 + ":1234:abcdef")
    with pytest.raises(ValueError, match="worker"):
        _run(db, study.id, worker="w" * 201)


def _acquire(db: Database, study_id: str, owner: str, ttl_s: float = 60) -> bool:
    with db.session() as session:
        return StudyRepo(session).try_acquire(study_id, owner, ttl_s)


def test_an_expired_lease_can_be_taken_over(db: Database, make_study: MakeStudy) -> None:
    study = make_study()
    assert _acquire(db, study.id, "coord-a", ttl_s=-1)  # already expired
    assert _acquire(db, study.id, "coord-b")
    with db.session() as session:
        repo = StudyRepo(session)
        assert not repo.renew(study.id, "coord-a", ttl_s=60), "the old owner has lost it"
        assert repo.require(study.id).owner == "coord-b"


def test_racing_coordinators_one_wins(db: Database, make_study: MakeStudy) -> None:
    study = make_study()
    barrier = threading.Barrier(6)
    wins: list[str] = []

    def contend(owner: str) -> None:
        barrier.wait()
        if _acquire(db, study.id, owner):
            wins.append(owner)

    threads = [threading.Thread(target=contend, args=(f"coord-{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(wins) == 1


# --------------------------------------------------------------------------- trials


def test_create_running_numbers_from_zero(db: Database, make_study: MakeStudy) -> None:
    study, other = make_study(), make_study()
    first = _run(db, study.id, worker="node-1")
    second = _run(db, study.id, retry_of=0, attempt=2)
    assert (first.number, second.number) == (0, 1)
    assert _run(db, other.id).number == 0, "numbers are per study"
    assert first.state == TrialState.RUNNING and first.worker == "node-1"
    assert first.started_at is not None and first.started_at == first.heartbeat_at
    assert (second.retry_of, second.attempt, second.purpose) == (0, 2, "search")
    assert first.retried is False


def test_create_running_for_an_unknown_study(db: Database) -> None:
    with pytest.raises(StudyNotFound):
        _run(db, "st-nothere")


def test_concurrent_create_running_gives_consecutive_numbers(
    db: Database, make_study: MakeStudy
) -> None:
    study = make_study()
    threads_n, per_thread = 8, 5
    barrier = threading.Barrier(threads_n)
    numbers: list[int] = []
    errors: list[BaseException] = []

    def create() -> None:
        try:
            barrier.wait()
            for _ in range(per_thread):
                numbers.append(_run(db, study.id).number)
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=create) for _ in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted(numbers) == list(range(threads_n * per_thread))


def test_finish_fills_metrics_from_the_result(db: Database, make_study: MakeStudy) -> None:
    study = make_study()
    trial = _run(db, study.id)
    result = _result(2000.0)
    with db.session() as session:
        TrialRepo(session).finish(
            trial,
            TrialState.COMPLETE,
            result=result.model_dump(mode="json"),
            objective_value=2000.0,
        )
    assert trial.state == TrialState.COMPLETE and trial.finished_at is not None
    with db.session() as session:
        loaded = TrialRepo(session).get(study.id, trial.number)
        assert loaded is not None
        assert loaded.state == TrialState.COMPLETE
        assert (loaded.tokens_per_s, loaded.tokens_per_s_per_gpu) == (2000.0, 2000.0)
        assert (loaded.mfu, loaded.peak_mem_gib, loaded.compile_s) == (0.4123456789, 12.5, 31.25)
        assert loaded.objective_value == 2000.0
        assert loaded.fingerprint == FINGERPRINT.key
        assert loaded.error_class is None and loaded.error_message is None
        assert loaded.finished_at is not None and loaded.finished_at.tzinfo == dt.UTC


def test_a_trial_result_round_trips_through_json(db: Database, make_study: MakeStudy) -> None:
    study = make_study()
    trial = _run(db, study.id)
    result = _result(1234.5)
    with db.session() as session:
        TrialRepo(session).finish(trial, TrialState.COMPLETE, result=result, objective_value=1.0)
    with db.session() as session:
        loaded = TrialRepo(session).get(study.id, trial.number)
        assert loaded is not None and loaded.result is not None
        assert TrialResult.model_validate(loaded.result) == result


def test_a_failure_result_fills_error_fields(db: Database, make_study: MakeStudy) -> None:
    study = make_study()
    trial = _run(db, study.id)
    failure = TrialResult.failure(
        FailureClass.NUMERICS, "loss became nan at step 3", loss_last=float("nan")
    )
    with db.session() as session:
        TrialRepo(session).finish(trial, TrialState.INFEASIBLE, result=failure)
    with db.session() as session:
        loaded = TrialRepo(session).get(study.id, trial.number)
        assert loaded is not None
        assert (loaded.error_class, loaded.error_message) == (
            "numerics",
            "loss became nan at step 3",
        )
        assert loaded.result is not None and loaded.result["loss_last"] is None, (
            "NaN stored as null"
        )
        assert loaded.tokens_per_s is None and loaded.fingerprint is None


def test_a_nan_objective_is_not_a_measurement(db: Database, make_study: MakeStudy) -> None:
    study = make_study()
    trial = _run(db, study.id)
    with db.session() as session:
        TrialRepo(session).finish(trial, TrialState.COMPLETE, objective_value=float("nan"))
        assert TrialRepo(session).best(study.id) is None


def test_finish_twice_is_refused(db: Database, make_study: MakeStudy) -> None:
    study = make_study()
    trial = _run(db, study.id)
    stale = _run(db, study.id)
    with db.session() as session:
        TrialRepo(session).finish(trial, TrialState.COMPLETE, result=_result(), objective_value=1.0)
    with pytest.raises(TrialAlreadyFinished, match="already complete"), db.session() as session:
        TrialRepo(session).finish(trial, TrialState.FAILED, error_class="infra")

    # A stale copy of the row (loaded before someone else finished it) is refused by the
    # database, not just by the object's own state.
    with db.session() as session:
        other = session.get(Trial, stale.id)
        assert other is not None
        TrialRepo(session).finish(other, TrialState.FAILED, error_class="crash")
    assert stale.state == TrialState.RUNNING
    with pytest.raises(TrialAlreadyFinished, match="already failed"), db.session() as session:
        TrialRepo(session).finish(stale, TrialState.COMPLETE, result=_result())
    with db.session() as session:
        assert TrialRepo(session).get(study.id, stale.number).error_class == "crash"  # type: ignore[union-attr]


def test_finish_needs_a_final_state(db: Database, make_study: MakeStudy) -> None:
    trial = _run(db, make_study().id)
    with pytest.raises(ValueError, match="final state"), db.session() as session:
        TrialRepo(session).finish(trial, TrialState.RUNNING)


def test_create_pruned(db: Database, make_study: MakeStudy) -> None:
    study = make_study()
    _run(db, study.id)
    with db.session() as session:
        pruned = TrialRepo(session).create_pruned(
            study.id,
            params={"precision": "fp8-tensorwise"},
            config={},
            error_class="unsupported",
            error_message="fp8 needs compute capability >= 8.9",
        )
    assert pruned.number == 1 and pruned.state == TrialState.PRUNED
    assert pruned.started_at is None and pruned.finished_at is not None
    assert pruned.error_class == "unsupported"


def test_list_count_best(db: Database, make_study: MakeStudy) -> None:
    study = make_study()
    trials = [_run(db, study.id) for _ in range(4)]
    with db.session() as session:
        repo = TrialRepo(session)
        repo.finish(trials[0], TrialState.COMPLETE, result=_result(100.0), objective_value=100.0)
        repo.finish(trials[1], TrialState.COMPLETE, result=_result(300.0), objective_value=300.0)
        repo.finish(trials[2], TrialState.INFEASIBLE, error_class="oom", error_message="oom")
    with db.session() as session:
        repo = TrialRepo(session)
        assert [t.number for t in repo.list(study.id)] == [0, 1, 2, 3]
        assert [t.number for t in repo.list(study.id, states=[TrialState.COMPLETE])] == [0, 1]
        assert repo.count(study.id) == 4
        assert repo.count(study.id, states=[TrialState.RUNNING, TrialState.INFEASIBLE]) == 2
        assert repo.count(study.id, states=[]) == 0
        best = repo.best(study.id)
        assert best is not None and best.number == 1
        assert repo.best("st-other") is None


def test_heartbeat_and_mark_lost(db: Database, make_study: MakeStudy) -> None:
    study = make_study()
    alive, dead, finished = (_run(db, study.id) for _ in range(3))
    with db.session() as session:
        TrialRepo(session).finish(
            finished, TrialState.COMPLETE, result=_result(), objective_value=1
        )
    # Age every heartbeat by an hour, then let only `alive` beat again.
    hour_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    with db.session() as session:
        for trial in TrialRepo(session).list(study.id):
            trial.heartbeat_at = hour_ago
    with db.session() as session:
        TrialRepo(session).heartbeat([alive.id, finished.id])
        TrialRepo(session).heartbeat([])
    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    with db.session() as session:
        lost = TrialRepo(session).mark_lost(study.id, heartbeat_older_than=cutoff)
    assert [t.number for t in lost] == [dead.number]
    assert lost[0].state == TrialState.LOST and lost[0].error_class == "infra"
    assert "no heartbeat since" in (lost[0].error_message or "")
    with db.session() as session:
        repo = TrialRepo(session)
        assert repo.get(study.id, alive.number).state == TrialState.RUNNING  # type: ignore[union-attr]
        assert repo.get(study.id, finished.number).heartbeat_at == hour_ago  # type: ignore[union-attr]
        assert repo.mark_lost(study.id, heartbeat_older_than=cutoff) == [], "lost only once"
    # A result that arrives after its trial was marked lost is refused, not recorded twice.
    with pytest.raises(TrialAlreadyFinished, match="already lost"), db.session() as session:
        TrialRepo(session).finish(dead, TrialState.COMPLETE, result=_result())


def test_deleting_a_study_deletes_its_trials(db: Database, make_study: MakeStudy) -> None:
    study = make_study()
    _run(db, study.id)
    with db.session() as session:
        session.delete(StudyRepo(session).require(study.id))
    with db.session() as session:
        assert TrialRepo(session).count(study.id) == 0


def test_unretried_failures_are_the_failed_and_lost_trials_not_run_again(
    db: Database, make_study: MakeStudy
) -> None:
    study = make_study()
    ok, failed, lost, retried, _still_running = (_run(db, study.id) for _ in range(5))
    with db.session() as session:
        repo = TrialRepo(session)
        repo.finish(ok, TrialState.COMPLETE, result=_result(), objective_value=1)
        repo.finish(failed, TrialState.FAILED, error_class="timeout", error_message="timeout")
        repo.finish(retried, TrialState.FAILED, error_class="crash", error_message="crash")
        repo.finish(lost, TrialState.LOST, error_class="infra", error_message="no heartbeat")
    with db.session() as session:
        row = TrialRepo(session).get(study.id, retried.number)
        assert row is not None
        row.retried = True
    with db.read() as session:
        found = sorted(TrialRepo(session).unretried_failures(study.id))
    assert found == [
        (TrialState.FAILED.value, failed.purpose, failed.attempt),
        (TrialState.LOST.value, lost.purpose, lost.attempt),
    ]
