"""Repository tests run on both backends: SQLite (the embedded default) and Postgres."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from autotuner.storage import Database, Study, StudyRepo


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    fixture = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def db(db_url: str) -> Database:
    return Database(db_url)


@pytest.fixture
def make_study(db: Database) -> Callable[..., Study]:
    def make(**overrides: Any) -> Study:
        fields: dict[str, Any] = {
            "name": "tiny",
            "model_spec": {"preset": "tiny"},
            "space": {"micro_batch_size": [1, 2, 4]},
            "max_trials": 10,
            "max_minutes": None,
        }
        fields.update(overrides)
        with db.session() as session:
            return StudyRepo(session).create(**fields)

    return make
