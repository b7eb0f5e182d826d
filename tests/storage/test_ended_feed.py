"""storage/ended_feed.py: a reader's place in a study's ended trials (the dashboard's kept charts,
the end of a study's kept rows and the live recommendation read through it); on both backends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotuner.storage import Database, Study, TrialRepo, TrialState
from autotuner.storage.ended_feed import EndedFeed
from autotuner.storage.trial_rows import ended_rows
from tests.storage.test_repository import _result


def _number(t: Any) -> int:
    return int(t.number)


def test_the_feed_hands_out_each_ended_trial_once_and_stops_at_the_first_running(
    db: Database, make_study: Callable[..., Study]
) -> None:
    study = make_study()
    with db.session() as s:
        repo = TrialRepo(s)
        trials = [repo.create_running(study.id, params={"mb": n}, config={}) for n in range(5)]
        for t in (trials[0], trials[1], trials[3]):
            repo.finish(t, TrialState.COMPLETE, result=_result(), objective_value=1000.0)
    feed = EndedFeed(study.id)

    def every(s: Any) -> Callable[[int, int], list[Any]]:
        """The charts' kind of read: every trial from `low`, the running ones too."""
        return lambda low, _high: [t for t in TrialRepo(s).list(study.id) if t.number >= low]

    def ended(s: Any, limit: int) -> Callable[[int, int], list[Any]]:
        """The end's kind: the ended ones alone, at most `limit`."""
        return lambda low, high: ended_rows(s, study.id, low, high, limit)

    with db.read() as s:
        taken, rest = feed.take(s, every(s), _number)
    assert [t.number for t in taken] == [0, 1]  # 2 still runs: 3 waits behind it
    assert [t.number for t in rest] == [2, 3, 4] and feed.low == 2
    with db.read() as s:  # nothing ended since: nothing handed out again
        assert feed.take(s, ended(s, 10), _number) == ([], [])
    with db.session() as s:
        repo = TrialRepo(s)
        (running,) = [t for t in repo.list(study.id) if t.number == 2]
        repo.finish(running, TrialState.FAILED, error_class="oom", error_message="oom")
    with db.read() as s:
        taken, rest = feed.take(s, ended(s, 1), _number)
    assert [t.number for t in taken] == [2] and rest == [] and feed.low == 3
    with db.read() as s:
        taken, rest = feed.take(s, every(s), _number)
    assert [t.number for t in taken] == [3] and [t.number for t in rest] == [4]
    assert feed.low == 4  # 4 runs


def test_with_done_the_feed_hands_out_trials_ended_past_the_first_running_once(
    db: Database, make_study: Callable[..., Study]
) -> None:
    """The live recommendation's kind of take: a trial that ended while an earlier one runs is
    handed out at once, and not again when the earlier one ends."""
    study = make_study()
    with db.session() as s:
        repo = TrialRepo(s)
        trials = [repo.create_running(study.id, params={"mb": n}, config={}) for n in range(5)]
        for t in (trials[0], trials[1], trials[3]):
            repo.finish(t, TrialState.COMPLETE, result=_result(), objective_value=1000.0)
    feed = EndedFeed(study.id)

    def take() -> tuple[list[int], list[int]]:
        with db.read() as s:
            taken, running = feed.take(
                s,
                lambda low, _high: [t for t in TrialRepo(s).list(study.id) if t.number >= low],
                _number,
                lambda t: t.state != TrialState.RUNNING,
            )
        return [t.number for t in taken], [t.number for t in running]

    def finish(number: int) -> None:
        with db.session() as s:
            repo = TrialRepo(s)
            (running,) = [t for t in repo.list(study.id) if t.number == number]
            repo.finish(running, TrialState.COMPLETE, result=_result(), objective_value=900.0)

    assert take() == ([0, 1, 3], [2, 4])  # 3 ended while 2 runs: taken now
    assert feed.low == 2 and feed.seen == {3}
    assert take() == ([], [2, 4])  # nothing ended since
    finish(2)
    assert take() == ([2], [4])  # 3 not again
    assert feed.low == 4 and feed.seen == set()
    finish(4)
    assert take() == ([4], []) and feed.low == 5
