"""Reads of a study through the service: compressed, from SQL aggregates and stored columns."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import event

from autotuner.api.app import ServiceSettings, create_app
from autotuner.storage.models import TrialState
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study import operations, trial_reads


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
    rows = {t["number"]: t for t in trial_reads.list_trials(db, study_id)}
    with db.read() as s:
        for trial in TrialRepo(s).list(study_id):
            result = trial.result or {}
            for name in ("tokens_per_s_min", "tokens_per_s_max", "wall_s"):
                assert rows[trial.number][name] == result.get(name), (trial.number, name)


def test_a_time_budget_shows_as_minutes_spent(sqlite_url: str) -> None:
    """A study with --minutes: its progress is the fuller of its two budgets, the minutes
    spent are in the view, and the lists say both (study/labels.budget_used)."""
    import datetime as dt

    from autotuner.search.space import parse_space
    from autotuner.spec import ModelSpec
    from autotuner.storage.models import Study
    from autotuner.study.coordinator import create_study
    from autotuner.study.labels import budget_used

    db = Database(sqlite_url)
    study_id = create_study(
        db,
        model=ModelSpec.resolve({"preset": "tiny"}),
        space=parse_space({"name": "s", "knobs": {"micro_batch_size": [4, 8]}}),
        max_trials=80,
        max_minutes=6,
    )
    assert operations.get_study(db, study_id)["minutes_used"] is None  # not started
    started = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=3)
    with db.session() as s:
        s.get(Study, study_id).started_at = started  # type: ignore[union-attr]
    view = operations.get_study(db, study_id)
    assert 2.9 < view["minutes_used"] < 3.5
    assert view["progress"] == view["minutes_used"] / 6  # time is the fuller budget: 0 of 80 trials
    assert budget_used(view) == f"0/80 · {view['minutes_used']:.1f}/6 min"

    with db.session() as s:  # ended past its budget (a trial launched in time ran on)
        s.get(Study, study_id).finished_at = started + dt.timedelta(minutes=7.1)  # type: ignore[union-attr]
    view = operations.get_study(db, study_id)
    assert view["minutes_used"] == 7.1 and view["progress"] == 1.0
    assert budget_used({**view, "max_trials": None}) == "0 launched · 7.1/6 min"
