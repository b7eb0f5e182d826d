"""`tune` run again finds the interrupted study of its name, and names what differs from it
(study/restore_match.py), on SQLite and Postgres. The subprocess version, a real interrupted
`tune` run again, is tests/coordinator/test_tune_again.py."""

from __future__ import annotations

from typing import Any

import pytest

from autotuner.status import StudyStatus
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.study.data_access import DataAccess
from autotuner.study.factory_access import FactoryAccess
from autotuner.study.operations import create_requested, validate_request
from autotuner.study.request import StudyRequest
from autotuner.study.restore_match import Difference, interrupted_namesake


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest) -> Database:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    return Database(url)


def _request(**overrides: Any) -> tuple[StudyRequest, Any, Any]:
    fields: dict[str, Any] = {"model": {"preset": "tiny"}, "space": "cpu-demo", "max_trials": 3}
    req = StudyRequest.model_validate({**fields, **overrides})
    model, space = validate_request(
        req, data_access=DataAccess.anywhere(), factory_access=FactoryAccess.anywhere()
    )
    return req, model, space


def _stored(db: Database, status: StudyStatus, **overrides: Any) -> str:
    req, model, space = _request(**overrides)
    study_id = create_requested(db, req, model, space, device_type="cpu")
    with db.session() as s:
        repo = StudyRepo(s)
        repo.set_status(repo.require(study_id), status)
    return study_id


def test_the_same_request_finds_its_interrupted_study(db: Database) -> None:
    study_id = _stored(db, StudyStatus.INTERRUPTED)
    found = interrupted_namesake(db, *_request())
    assert found is not None and found.id == study_id and found.name == "tiny / cpu-demo"
    assert found.differences == []


def test_a_request_that_differs_gets_each_difference(db: Database) -> None:
    _stored(db, StudyStatus.INTERRUPTED)
    asked = _request(
        max_trials=5, seed=1, options={"headroom": 0.2}, model={"preset": "tiny", "seq_len": 128}
    )
    found = interrupted_namesake(db, *asked)
    assert found is not None
    by_field = {d.field: d for d in found.differences}
    assert by_field["max_trials"] == Difference("max_trials", 3, 5)
    assert by_field["seed"] == Difference("seed", 0, 1)
    assert by_field["options.headroom"].asked == 0.2
    assert by_field["model.seq_len"] == Difference("model.seq_len", 64, 128)
    assert set(by_field) == {"max_trials", "seed", "options.headroom", "model.seq_len"}


def test_another_name_or_a_study_not_interrupted_is_a_new_study(db: Database) -> None:
    _stored(db, StudyStatus.INTERRUPTED)
    assert interrupted_namesake(db, *_request(name="another")) is None
    # The newest of the name decides: a later completed one is what a tune again follows.
    _stored(db, StudyStatus.COMPLETED)
    assert interrupted_namesake(db, *_request()) is None
