"""`best --headroom` re-judges a study's measured trials at another headroom: the answer is the
recommendation computed from the study's trials (read as ORM rows, every column loaded) with
that headroom, its checks shown as ended (the study has), plus the note that says so, whatever
the trials are read as for speed."""

from __future__ import annotations

import json
import random

import pytest

from autotuner.options import StudyOptions
from autotuner.search import headroom_check, numerics
from autotuner.search.objective import Objective
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study import operations
from autotuner.study.recommend import recommend
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
