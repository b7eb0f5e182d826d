"""Shared fixtures: real databases, created by the real migrations; the tiers' markers.

Tiers (`make test-fast` runs `-m "not (gpu or slow or ray or service or trials or browser)"`):
the markers below are put on tests here, by the fixtures they use or the folder they are in,
so a new test that starts a service or a Ray head lands in the right tier without a decorator.
`slow`, `gpu` and `postgres` are still written on the tests themselves.

Postgres: the server at $AUTOTUNER_TEST_PG (default postgresql+psycopg://postgres@127.0.0.1:5432,
trust auth). Each test session creates its own database with a random name, migrates it with
`alembic upgrade head`, and drops it at the end; `pg_url` empties its tables before each test.
Tests that use it must be marked `@pytest.mark.postgres`.

    def test_something(pg_url):          # a migrated, empty Postgres database
    def test_other(sqlite_url):          # a migrated SQLite file under tmp_path
    def test_migrations(pg_empty_url):   # a fresh database with no tables at all
    def test_outage(private_postgres):   # a server of the test's own, to stop and restart
                                         # (tests/pgserver.py: .url, .stop(), .restart(down_s))
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from tests.pgserver import PrivatePostgres

# SQLAlchemy and the storage package are imported inside the fixtures: test runs that never ask
# for a database (the workers, the GPU box) don't pay for them.

# A test that uses one of these fixtures gets the marker (see pyproject.toml for each meaning).
MARK_BY_FIXTURE = {
    "ray_address": "ray",
    "start_service": "service",
    "service": "service",
    "private_postgres": "service",
}
# Every test under one of these folders gets the marker.
MARK_BY_FOLDER = {
    "workers": "trials",
}
# And these test files.
MARK_BY_FILE = {
    "test_dashboard_browser.py": "browser",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests_dir = Path(__file__).parent
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        marks = {mark for fixture, mark in MARK_BY_FIXTURE.items() if fixture in names}
        path = Path(item.path)
        if path.is_relative_to(tests_dir):
            folder = path.relative_to(tests_dir).parts[0]
            if folder in MARK_BY_FOLDER:
                marks.add(MARK_BY_FOLDER[folder])
        if path.name in MARK_BY_FILE:
            marks.add(MARK_BY_FILE[path.name])
        for mark in sorted(marks):
            item.add_marker(mark)


@pytest.fixture(autouse=True)
def _collector_back_on() -> Iterator[None]:
    """A read verb run in-process (CliRunner) turns the cyclic collector off for good, as its
    own process would until exit (cli.common.short_lived): turn it back on for the next test."""
    yield
    import gc

    gc.enable()


PG_ENV = "AUTOTUNER_TEST_PG"
PG_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432"


def _pg_base() -> URL:
    from sqlalchemy.engine import make_url

    from autotuner.storage.session import normalize_url

    return make_url(normalize_url(os.environ.get(PG_ENV) or PG_DEFAULT))


def _render(url: URL) -> str:
    return url.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[Callable[[str], None]]:
    """Run one statement (CREATE/DROP DATABASE) on the server's `postgres` database."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    base = _pg_base()
    engine = create_engine(
        _render(base.set(database="postgres")),
        isolation_level="AUTOCOMMIT",
        poolclass=NullPool,
        connect_args={"connect_timeout": 5},
    )
    problem = None
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as error:
        problem = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
    if problem:
        pytest.fail(
            f"PostgreSQL is not reachable at {base.render_as_string(hide_password=True)} "
            f"({problem}); start it, point ${PG_ENV} at one, or deselect with -m 'not postgres'",
            pytrace=False,
        )

    def run(statement: str) -> None:
        with engine.connect() as connection:
            connection.execute(text(statement))

    yield run
    engine.dispose()


@pytest.fixture(scope="session")
def pg_new_database(pg_admin: Callable[[str], None]) -> Iterator[Callable[[], str]]:
    """A factory of empty databases with random names, all dropped when the session ends."""
    from autotuner.storage.session import dispose_engines

    created: list[str] = []

    def create() -> str:
        name = f"autotuner_test_{uuid.uuid4().hex[:12]}"
        pg_admin(f'CREATE DATABASE "{name}"')
        created.append(name)
        return _render(_pg_base().set(database=name))

    yield create
    dispose_engines()  # pooled connections would otherwise hold the databases open
    for name in created:
        pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_database(pg_new_database: Callable[[], str]) -> str:
    """This session's migrated Postgres database (shared by the session's tests, not emptied)."""
    from autotuner.storage.session import upgrade_database

    url = pg_new_database()
    upgrade_database(url)
    return url


@pytest.fixture
def pg_url(pg_database: str) -> str:
    """The URL of the session's migrated Postgres database, its tables emptied for this test."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(pg_database, poolclass=NullPool)
    try:
        with engine.begin() as connection:
            # A test that leaked an open transaction would block TRUNCATE: fail, don't hang.
            connection.execute(text("SET LOCAL lock_timeout = '10s'"))
            connection.execute(
                text("TRUNCATE studies, trials, coordinators RESTART IDENTITY CASCADE")
            )
    finally:
        engine.dispose()
    return pg_database


@pytest.fixture
def pg_empty_url(pg_new_database: Callable[[], str]) -> str:
    """A brand-new Postgres database with no schema (for migration tests)."""
    return pg_new_database()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """The URL of a migrated SQLite database file under tmp_path."""
    from autotuner.storage.session import upgrade_database

    url = f"sqlite:///{tmp_path / 'autotuner.db'}"
    upgrade_database(url)
    return url


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A PostgreSQL server of this test's own (started, database `autotuner` migrated), for
    tests that stop or restart the database: never do that to the shared server. Removed at
    the end, whatever the test did to it. See tests/pgserver.py."""
    from tests.pgserver import PrivatePostgres, find_bindir

    if find_bindir() is None:
        pytest.skip("no PostgreSQL binaries (initdb, pg_ctl) on this machine")
    server = PrivatePostgres()
    try:
        server.create()
        yield server
    finally:
        from autotuner.storage.session import dispose_engines

        dispose_engines()  # pooled connections to it would otherwise outlive the server
        server.destroy()
