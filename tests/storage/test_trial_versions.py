"""A study's trials version moves with every transaction that writes one of its trials, and the
study views cached on it (study/versioned.py) show each write at once; on both backends."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from autotuner.storage import Database, Study, StudyRepo, TrialRepo, TrialState
from autotuner.study import operations
from tests.storage.test_repository import _result


def _version(db: Database, study_id: str) -> int:
    with db.read() as s:
        study = StudyRepo(s).require(study_id)
        return study.trials_version


def _counts(db: Database, study_id: str) -> dict[str, int]:
    return dict(operations.get_study(db, study_id)["trial_counts"])


def test_each_trial_write_moves_the_version_and_the_view_follows(
    db: Database, make_study: Callable[..., Study]
) -> None:
    study = make_study()
    assert _version(db, study.id) == 0
    assert _counts(db, study.id) == {}  # cached at version 0
    with db.session() as s:
        for _ in range(2):  # two trials, one transaction: one step
            TrialRepo(s).create_running(study.id, params={"mb": 1}, config={})
    assert _version(db, study.id) == 1
    assert _counts(db, study.id) == {"running": 2}
    with db.session() as s:
        repo = TrialRepo(s)
        trial = repo.get(study.id, 0)
        assert trial is not None
        repo.finish(trial, TrialState.COMPLETE, result=_result(), objective_value=1000.0)
    assert _version(db, study.id) == 2
    assert _counts(db, study.id) == {"running": 1, "complete": 1}
    with db.session() as s:  # changed through the ORM: marked lost
        far = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
        TrialRepo(s).mark_lost(study.id, heartbeat_older_than=far)
    assert _version(db, study.id) == 3
    assert _counts(db, study.id) == {"lost": 1, "complete": 1}
    listed = {v["id"]: v for v in operations.list_studies(db)}
    assert listed[study.id]["trial_counts"] == {"lost": 1, "complete": 1}


def test_heartbeats_and_rolled_back_writes_leave_it(
    db: Database, make_study: Callable[..., Study]
) -> None:
    study, other = make_study(), make_study(name="other")
    with db.session() as s:
        trial = TrialRepo(s).create_running(study.id, params={"mb": 1}, config={})
    before = _version(db, study.id)
    with db.session() as s:
        TrialRepo(s).heartbeat([trial.id])
    assert _version(db, study.id) == before

    class Undo(Exception):
        pass

    try:
        with db.session() as s:
            TrialRepo(s).create_running(study.id, params={"mb": 2}, config={})
            raise Undo
    except Undo:
        pass
    assert _version(db, study.id) == before
    assert _counts(db, study.id) == {"running": 1}
    assert _version(db, other.id) == 0  # another study's writes are not its


def test_the_cache_never_keeps_what_a_write_transaction_read(
    db: Database, make_study: Callable[..., Study]
) -> None:
    """A write transaction's own uncommitted trials must not be served to readers later: it
    reads the counts fresh, and a rollback leaves the readers' view as it was."""
    study = make_study()
    assert _counts(db, study.id) == {}

    class Undo(Exception):
        pass

    seen: dict[str, Any] = {}
    try:
        with db.session() as s:
            TrialRepo(s).create_running(study.id, params={"mb": 1}, config={})
            _, summary = operations.find_study(s, study.id)
            seen = dict(summary.counts)
            raise Undo
    except Undo:
        pass
    assert seen == {"running": 1}
    assert _counts(db, study.id) == {}


def test_kept_big_values_are_out_of_the_collectors_reach_until_dropped(
    db: Database, make_study: Callable[..., Study]
) -> None:
    """A value VersionedObjects keeps (the re-judge's measured configs: a few hundred thousand
    objects at 50,000 trials) is frozen out of the cyclic collector, so that no full
    collection walks it in some other request; once dropped, its cycles are collected."""
    import gc
    import weakref

    from autotuner.study.versioned import VersionedObjects

    class Node:
        def __init__(self) -> None:
            self.me = self  # a cycle: only the collector frees it

    kept = VersionedObjects(size=1)
    first, second = make_study(), make_study(name="second")
    try:
        with db.read() as s:
            study = StudyRepo(s).require(first.id)
            value = kept.get(s, study, lambda: [Node() for _ in range(3)])
        tracked = {id(o) for o in gc.get_objects()}
        assert not any(id(node) in tracked for node in value)  # frozen: not walked
        assert gc.get_freeze_count() > 0
        gone = weakref.ref(value[0])
        del value
        assert gone() is not None  # still kept
        with db.read() as s:  # another study: the first's value is dropped
            kept.get(s, StudyRepo(s).require(second.id), lambda: [Node()])
        assert gone() is None  # its cycle was collected, not left frozen for good
    finally:
        gc.unfreeze()


def test_a_followed_state_is_carried_across_versions_and_freed_with_its_study(
    db: Database, make_study: Callable[..., Study]
) -> None:
    """VersionedObjects.follow (the dashboard's kept charts): a new version computes from the
    state kept for the study, which stays frozen; the value it replaces is let go without a
    full collection; another `same`, or the study dropped, starts over and frees the state's
    cycles. get's value, replaced at a new version, has its cycles freed there too."""
    import gc
    import weakref

    from autotuner.study.versioned import VersionedObjects

    class State:
        def __init__(self) -> None:
            self.me = self  # a cycle: only the collector frees it
            self.seen: list[int | None] = []

    def compute(state: State) -> list[Any]:
        state.seen.append(study.trials_version)
        return [state, list(state.seen)]

    def write_trial() -> None:
        with db.session() as s:
            TrialRepo(s).create_running(first.id, params={"mb": 1}, config={})

    kept = VersionedObjects(size=1)
    first, second = make_study(), make_study(name="second")
    try:
        with db.read() as s:
            study = StudyRepo(s).require(first.id)
            state, seen = kept.follow(s, study, State, compute)
            assert kept.follow(s, study, State, compute)[1] is seen  # not computed again
        assert seen == [study.trials_version]
        garbage = State()  # frozen cyclic garbage: freed only by a collection of everything
        gc.freeze()
        frozen = weakref.ref(garbage)
        del garbage
        write_trial()
        with db.read() as s:
            study = StudyRepo(s).require(first.id)
            again, seen = kept.follow(s, study, State, compute)
        assert again is state and len(seen) == 2  # from the kept state
        assert id(state) not in {id(o) for o in gc.get_objects()}  # still frozen
        assert frozen() is not None  # nothing unfrozen: no collection of everything
        gone = weakref.ref(state)
        del state, again
        with db.read() as s:  # another `same`: a fresh state; the first one's cycle freed
            study = StudyRepo(s).require(first.id)
            fresh, seen = kept.follow(s, study, State, compute, same="other")
        assert gone() is None and fresh.seen == seen == [study.trials_version]
        assert frozen() is None
        gone = weakref.ref(fresh)
        del fresh
        with db.read() as s:  # another study: the first one dropped
            kept.follow(s, StudyRepo(s).require(second.id), State, compute)
        assert gone() is None

        with db.read() as s:  # get: the value is all there is, freed when replaced
            study = StudyRepo(s).require(first.id)
            value = kept.get(s, study, State)
        gone = weakref.ref(value)
        del value
        write_trial()
        with db.read() as s:
            study = StudyRepo(s).require(first.id)
            kept.get(s, study, State)
        assert gone() is None
    finally:
        gc.unfreeze()


def test_a_trial_the_cancel_stopped_counts_as_cancelled_not_failed(
    db: Database, make_study: Callable[..., Study]
) -> None:
    """trial_counts (the study view, the list, the dashboard's progress line, `status`) count
    each trial as the trial tables label it (study/labels.py): a trial stopped by its study's
    cancel is stored as failed, and counted as `cancelled`."""
    from autotuner.study.labels import CANCELLED_MESSAGE

    study = make_study()
    with db.session() as s:
        repo = TrialRepo(s)
        trials = [repo.create_running(study.id, params={"mb": n}, config={}) for n in (1, 2, 4)]
        repo.finish(trials[0], TrialState.FAILED, error_class="oom", error_message="oom: 2 GiB")
        repo.finish(
            trials[1], TrialState.FAILED, error_class="infra", error_message=CANCELLED_MESSAGE
        )
    assert _counts(db, study.id) == {"failed": 1, "cancelled": 1, "running": 1}
    with db.session() as s:  # the other running one, cancelled too: no failure left but one
        repo = TrialRepo(s)
        trial = repo.get(study.id, 2)
        assert trial is not None
        repo.finish(
            trial, TrialState.FAILED, error_class="infra", error_message=CANCELLED_MESSAGE + "!"
        )
    assert _counts(db, study.id) == {"failed": 1, "cancelled": 2}
    listed = {v["id"]: v for v in operations.list_studies(db)}
    assert listed[study.id]["trial_counts"] == {"failed": 1, "cancelled": 2}
