"""`best --headroom` re-judges a study's measured trials at another headroom: the answer is the
recommendation computed from the study's trials (read as ORM rows, every column loaded) with
that headroom, its checks shown as ended (the study has), plus the note that says so, whatever
the trials are read as for speed."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from autotuner.options import StudyOptions
from autotuner.search import headroom_check, numerics
from autotuner.search.objective import Objective
from autotuner.storage import trial_rows
from autotuner.storage.models import TrialState
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study import operations
from autotuner.study.measurements import over_memory, rank_groups, study_noise_rel
from autotuner.study.recommend import recommend
from autotuner.study.recommend_measured import MeasuredConfigs
from bench.reads_lib.seed import seed_study


@pytest.mark.parametrize("headroom", [0.0, 0.05, 0.1, 0.3])
def test_the_rejudged_recommendation_is_the_one_at_that_headroom(
    sqlite_url: str, headroom: float
) -> None:
    db = Database(sqlite_url)
    study_id = seed_study(db, trials=300, name="big", rng=random.Random(9))
    rejudged = operations.get_best(db, study_id, headroom=headroom)["best"]
    assert rejudged is not None
    note = rejudged.pop("rejudged")
    assert note["headroom"] == headroom and "nothing stored" in note["text"]
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
        expected = recommend(
            trials, Objective.TOKENS_PER_S, options=StudyOptions(headroom=headroom)
        )
    assert expected is not None
    expected["numerics"] = numerics.as_ended(expected["numerics"])
    expected["headroom"] = headroom_check.as_ended(expected["headroom"])
    assert json.dumps(rejudged, sort_keys=True) == json.dumps(expected, sort_keys=True)
    # The study's own recommendation is left as it was.
    assert operations.get_best(db, study_id)["best"].get("rejudged") is None


def _full_recommendation(db: Database, study_id: str, headroom: float) -> dict[str, Any]:
    """The recommendation from the study's ORM rows at `headroom`, as best --headroom shows it
    (checks ended, the note added)."""
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
        expected = recommend(
            trials, Objective.TOKENS_PER_S, options=StudyOptions(headroom=headroom)
        )
    assert expected is not None
    expected["numerics"] = numerics.as_ended(expected["numerics"])
    expected["headroom"] = headroom_check.as_ended(expected["headroom"])
    return expected


def _rejudged(db: Database, study_id: str, headroom: float) -> dict[str, Any]:
    rejudged = operations.get_best(db, study_id, headroom=headroom)["best"]
    assert rejudged is not None
    assert rejudged.pop("rejudged")["headroom"] == headroom
    return dict(rejudged)


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _measure_again_faster(db: Database, study_id: str, number: int) -> None:
    """One more measurement of trial `number`'s config, 2% above its throughput, written as a
    coordinator writes a trial (a running row, then its result): the config's pooled median,
    its measurements and the recommendation's numbers change."""
    with db.session() as s:
        repo = TrialRepo(s)
        old = repo.get(study_id, number)
        assert old is not None and old.result is not None
        params, config, result = dict(old.params), dict(old.config), dict(old.result)
        new = repo.create_running(study_id, params=params, config=config, worker="test")
        new_number = new.number
    result.update(
        {
            name: result[name] * 1.02
            for name in ("tokens_per_s", "tokens_per_s_min", "tokens_per_s_max")
        }
    )
    with db.session() as s:
        repo = TrialRepo(s)
        row = repo.get(study_id, new_number)
        assert row is not None
        repo.finish(row, TrialState.COMPLETE, result=result, objective_value=result["tokens_per_s"])


@pytest.mark.parametrize("database", ["sqlite_url", "pg_url"])
def test_a_rejudge_after_a_trial_is_written_is_computed_again(
    request: pytest.FixtureRequest, database: str
) -> None:
    """Re-judges at several headrooms share what the study's trials give (kept per trials
    version); a trial written moves the version, and the next re-judge is the full computation
    over the trials as they are now, never the kept answer."""
    db = Database(request.getfixturevalue(database))
    study_id = seed_study(db, trials=300, name="big", rng=random.Random(9))
    first = {}
    for headroom in (0.1, 0.0, 0.05, 0.3, 0.1):
        first[headroom] = _rejudged(db, study_id, headroom)
        assert _same(first[headroom], _full_recommendation(db, study_id, headroom))
    _measure_again_faster(db, study_id, first[0.05]["trial_number"])
    for headroom in (0.05, 0.3):
        after = _rejudged(db, study_id, headroom)
        assert _same(after, _full_recommendation(db, study_id, headroom))
    # Not the answer kept before the trial was written.
    assert not _same(_rejudged(db, study_id, 0.05), first[0.05])


@pytest.mark.parametrize("max_mem_gib", [None, 20.0])
def test_the_configs_that_fit_are_those_rank_groups_gives(
    sqlite_url: str, max_mem_gib: float | None
) -> None:
    """MeasuredConfigs.fitting at a headroom (and a memory ceiling): the same configs, in the
    same order, with the same trials, as rank_groups over the trials over_memory keeps."""
    db = Database(sqlite_url)
    study_id = seed_study(db, trials=300, name="big", rng=random.Random(9))
    with db.read() as s:
        configs = MeasuredConfigs(trial_rows.recommendation_rows(s, study_id))
        for headroom in (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5):
            options = StudyOptions(headroom=headroom, max_mem_gib=max_mem_gib)
            fits = [(key, t) for key, t in configs.keyed if not over_memory(t, options)]
            expected = [(g.key, [t.number for t in g.trials]) for g in rank_groups(fits)]
            fit = configs.fitting(options)
            got = [(g.key, [t.number for t in g.trials]) for g in fit.ranked]
            assert got == expected
            assert fit.noise_rel() == study_noise_rel(rank_groups(fits))
