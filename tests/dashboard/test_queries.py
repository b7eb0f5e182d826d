"""The studies list costs a constant number of SQL statements, however many studies there are.

Counted on the real Postgres with a `before_cursor_execute` listener on the engine, for the
dashboard's page (HTML and JSON) and `operations.list_studies`, which it and /api/studies call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.repository import TrialRepo
from autotuner.storage.session import Database
from autotuner.study import operations
from autotuner.study.coordinator import create_study
from tests.dashboard.conftest import KNOBS, make_app

pytestmark = pytest.mark.postgres


@contextmanager
def _counting(db: Database) -> Iterator[list[str]]:
    statements: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(db.engine, "before_cursor_execute", record)


def _add_studies(db: Database, n: int) -> None:
    space = parse_space({"name": "count", "knobs": KNOBS})
    for i in range(n):
        study_id = create_study(
            db, model=ModelSpec.resolve({"preset": "tiny"}), space=space, max_trials=5
        )
        with db.session() as s:
            for _ in range(i % 3):  # 0, 1 or 2 trials each
                TrialRepo(s).create_pruned(
                    study_id, params={}, config={}, error_class="oom", error_message="test"
                )


def test_studies_list_runs_a_constant_number_of_statements(pg_url: str) -> None:
    db = Database(pg_url)
    client = TestClient(make_app(db))
    reads: dict[str, Callable[[], object]] = {
        "page": lambda: client.get("/").raise_for_status(),
        "page json": lambda: client.get("/?format=json").raise_for_status(),
        "operation": lambda: operations.list_studies(db, limit=200),
    }

    def count() -> dict[str, int]:
        out = {}
        for name, read in reads.items():
            with _counting(db) as statements:
                read()
            out[name] = len(statements)
        return out

    _add_studies(db, 1)
    one = count()
    _add_studies(db, 29)
    thirty = count()
    assert len(client.get("/?format=json").json()["studies"]) == 30
    assert one == thirty, f"statements for 1 study: {one}, for 30: {thirty}"
    assert max(thirty.values()) <= 3, thirty
