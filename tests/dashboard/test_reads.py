"""Reads of a study through the service: compressed, from SQL aggregates and stored columns."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import event

from autotuner.api.app import ServiceSettings, create_app
from autotuner.storage.models import TrialState
from autotuner.storage.repository import TrialRepo
from autotuner.storage.session import Database
from autotuner.study import operations


def _client(db: Database) -> TestClient:
    settings = ServiceSettings(db_url=str(db.url), coordinator=False, migrate=False)
    return TestClient(create_app(settings))


def test_responses_are_gzipped(study: tuple[Database, str]) -> None:
    db, study_id = study
    with _client(db) as client:
        trials = client.get(f"/api/studies/{study_id}/trials", headers={"Accept-Encoding": "gzip"})
        assert trials.status_code == 200 and trials.headers["content-encoding"] == "gzip"
        assert len(trials.json()) >= 10  # the client inflated it
        assert int(trials.headers["content-length"]) < len(trials.content) / 3
        page = client.get(f"/studies/{study_id}", headers={"Accept-Encoding": "gzip"})
        assert page.headers["content-encoding"] == "gzip"
        plain = client.get(f"/api/studies/{study_id}/trials", headers={"Accept-Encoding": ""})
        assert "content-encoding" not in plain.headers  # a client that did not ask gets it plain


def test_the_study_view_counts_in_sql_and_reads_no_trial_row(study: tuple[Database, str]) -> None:
    db, study_id = study
    statements: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        view = operations.get_study(db, study_id)
        best = operations.get_best(db, study_id)
    finally:
        event.remove(db.engine, "before_cursor_execute", record)
    trial_reads = [s for s in statements if "FROM trials" in s]
    assert trial_reads and all("count(" in s for s in trial_reads), trial_reads
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
    assert view["trials_total"] == len(trials) == best["total_trials"]
    measured = [t for t in trials if t.state == TrialState.COMPLETE and t.purpose == "search"]
    assert view["best_value"] == max(t.objective_value or 0 for t in measured)
    launched = [t for t in trials if t.state != TrialState.PRUNED and t.retry_of is None]
    assert view["trials_launched"] == len(launched)
    assert view["progress"] == min(len(launched) / 10, 1.0)


def test_trial_lists_show_columns_equal_to_the_result(study: tuple[Database, str]) -> None:
    db, study_id = study
    rows = {t["number"]: t for t in operations.list_trials(db, study_id)}
    with db.read() as s:
        for trial in TrialRepo(s).list(study_id):
            result = trial.result or {}
            for name in ("tokens_per_s_min", "tokens_per_s_max", "wall_s"):
                assert rows[trial.number][name] == result.get(name), (trial.number, name)
