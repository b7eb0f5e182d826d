"""Where the database is, connecting to it, and the transaction scope."""

from __future__ import annotations

import datetime as dt
import sqlite3
import time
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import text

from autotuner.storage import Database, DatabaseUnavailable, StudyRepo, resolve_database_url
from autotuner.storage import session as session_module
from autotuner.storage import urls as urls_module
from autotuner.storage.models import Study


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("AUTOTUNER_DATABASE_URL", raising=False)
    data_dir = tmp_path / "data" / "autotuner"
    monkeypatch.setattr(urls_module.platformdirs, "user_data_dir", lambda app: str(data_dir))
    return data_dir


def test_resolve_precedence_cli_over_env_over_default(
    no_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert resolve_database_url(None) == f"sqlite:///{no_env / 'autotuner.db'}"
    assert no_env.is_dir(), "the default's folder is created"

    monkeypatch.setenv("AUTOTUNER_DATABASE_URL", "postgresql://u@envhost/db")
    assert resolve_database_url(None) == "postgresql+psycopg://u@envhost/db"
    assert resolve_database_url("") == "postgresql+psycopg://u@envhost/db"

    assert resolve_database_url("postgres://u@clihost/db") == "postgresql+psycopg://u@clihost/db"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://a:b@h:5433/x", "postgresql+psycopg://a:b@h:5433/x"),
        ("postgres://h/x", "postgresql+psycopg://h/x"),
        ("postgresql+psycopg://h/x", "postgresql+psycopg://h/x"),
        ("sqlite:////abs/t.db", "sqlite:////abs/t.db"),
    ],
)
def test_resolve_normalises_drivers(no_env: Path, given: str, expected: str) -> None:
    assert resolve_database_url(given) == expected


def test_bare_path_is_an_sqlite_file(
    no_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_database_url("runs/tune.db") == f"sqlite:///{tmp_path / 'runs' / 'tune.db'}"
    assert resolve_database_url("/x/y.db") == "sqlite:////x/y.db"


def test_unreachable_postgres_fails_fast_with_a_remedy() -> None:
    db = Database("postgresql://postgres:secret@127.0.0.1:5999/x")
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable) as caught:
        db.check()
    assert time.monotonic() - started < 6
    message = str(caught.value)
    assert message == (
        "cannot reach the database at postgresql+psycopg://postgres:***@127.0.0.1:5999/x: "
        "connection refused; is PostgreSQL running at 127.0.0.1:5999? "
        "set --db or AUTOTUNER_DATABASE_URL"
    )
    assert "secret" not in message and "\n" not in message


@pytest.mark.postgres
def test_missing_postgres_database_says_how_to_create_it(pg_url: str) -> None:
    from sqlalchemy.engine import make_url

    url = make_url(pg_url).set(database="autotuner_no_such_db").render_as_string(False)
    with pytest.raises(DatabaseUnavailable, match=r"does not exist; create it \(createdb"):
        Database(url).check()


def test_sqlite_in_a_missing_folder_says_what_to_check(tmp_path: Path) -> None:
    with pytest.raises(DatabaseUnavailable, match="check that its folder exists"):
        Database(f"sqlite:///{tmp_path / 'nope' / 'x.db'}").check()


def test_open_migrates_and_engines_are_cached(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'open.db'}"
    db = Database.open(url)
    assert Database(url).engine is db.engine
    with db.session() as session:
        assert StudyRepo(session).list() == []
        version = session.execute(text("SELECT version_num FROM alembic_version")).scalar()
    head = ScriptDirectory.from_config(session_module.alembic_config(url)).get_current_head()
    assert version == head


def test_sqlite_connections_use_wal_and_foreign_keys(sqlite_url: str) -> None:
    with Database(sqlite_url).session() as session:
        assert session.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert session.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert session.execute(text("PRAGMA busy_timeout")).scalar() == 30_000


def test_session_commits_or_rolls_back(db: Database) -> None:
    with db.session() as session:
        kept = StudyRepo(session).create(
            name="kept", model_spec={}, space={}, max_trials=1, max_minutes=None
        )
    with pytest.raises(RuntimeError, match="boom"), db.session() as session:
        StudyRepo(session).create(
            name="gone", model_spec={}, space={}, max_trials=1, max_minutes=None
        )
        raise RuntimeError("boom")
    with db.session() as session:
        assert [s.name for s in StudyRepo(session).list()] == ["kept"]
    assert kept.name == "kept", "objects stay readable after their transaction"


def test_times_come_back_aware_utc(db: Database) -> None:
    with db.session() as session:
        study = StudyRepo(session).create(
            name="t", model_spec={}, space={}, max_trials=1, max_minutes=None
        )
    paris = dt.timezone(dt.timedelta(hours=1))
    moment = dt.datetime(2026, 3, 1, 13, 0, 0, 123456, tzinfo=paris)
    with db.session() as session:
        row = session.get(Study, study.id)
        assert row is not None
        row.started_at = moment
    with db.session() as session:
        row = session.get(Study, study.id)
        assert row is not None and row.started_at == moment
        assert row.started_at.tzinfo == dt.UTC and row.started_at.hour == 12
        assert row.created_at.tzinfo == dt.UTC


def test_naive_datetimes_are_refused(db: Database) -> None:
    with pytest.raises(Exception, match="naive datetime"), db.session() as session:
        row = StudyRepo(session).create(
            name="t", model_spec={}, space={}, max_trials=1, max_minutes=None
        )
        row.started_at = dt.datetime(2026, 1, 1)
        session.flush()


def test_sqlite_file_is_a_real_sqlite_database(sqlite_url: str) -> None:
    path = sqlite_url.removeprefix("sqlite:///")
    tables = {
        row[0]
        for row in sqlite3.connect(path).execute(
            "SELECT name FROM sqlite_master WHERE type='table'"
        )
    }
    assert {"studies", "trials", "alembic_version"} <= tables


@pytest.mark.parametrize(
    ("driver_message", "expected"),
    [
        ("connection timeout expired", "no answer within 5 s; is db.example:5432 reachable"),
        (
            'FATAL:  password authentication failed for user "tuner"',
            "authentication failed for user 'tuner'; check the user and password",
        ),
        (
            'failed to resolve host "db.example": [Errno -2] Name or service not known',
            "unknown host 'db.example'; check the host",
        ),
        ("something new\nsecond line", "something new; set --db or AUTOTUNER_DATABASE_URL"),
    ],
)
def test_connection_failures_are_explained(driver_message: str, expected: str) -> None:
    from sqlalchemy.exc import OperationalError

    error = OperationalError("SELECT 1", {}, Exception(driver_message))
    message = session_module._explain("postgresql+psycopg://tuner:pw@db.example/x", error)
    assert message.startswith("cannot reach the database at postgresql+psycopg://tuner:***@")
    assert expected in message and "\n" not in message
