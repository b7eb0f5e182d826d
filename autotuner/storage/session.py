"""Where the database is, how to connect to it, and one transaction per unit of work.

`resolve_database_url` picks the URL (`--db` > `AUTOTUNER_DATABASE_URL` > an SQLite file in the
user data folder). `Database` wraps a cached engine: `with db.session() as s:` is one
transaction that commits on success and rolls back on error; `with db.read() as s:` is one that
only reads (on SQLite it does not take the write lock, so readers never wait for writers);
`with db.reading() as c:` is the same on a Core connection, for reads of the tables alone
(storage/reads.py), which import no ORM.
`upgrade_database` runs Alembic; migrations are the only way the schema is created.
The URL handling lives in urls.py and the migration helpers in migrate.py; both are re-exported
here, where the CLI, migrations/env.py and the tests import them from.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import Connection, Engine, create_engine, event, exc, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from autotuner.storage.migrate import SCHEMA_REVISION
from autotuner.storage.migrate import alembic_config as alembic_config
from autotuner.storage.migrate import migrations_dir as migrations_dir
from autotuner.storage.migrate import upgrade_database as upgrade_database
from autotuner.storage.urls import _REMEDY, normalize_url, redact
from autotuner.storage.urls import ENV_VAR as ENV_VAR
from autotuner.storage.urls import SUPPORTED_SCHEMES as SUPPORTED_SCHEMES
from autotuner.storage.urls import URL_FORMS as URL_FORMS
from autotuner.storage.urls import UnsupportedDatabaseUrl as UnsupportedDatabaseUrl
from autotuner.storage.urls import redact_unparsed as redact_unparsed
from autotuner.storage.urls import resolve_database_url as resolve_database_url

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

PG_CONNECT_TIMEOUT_S = 5
# A statement that runs longer than this is cancelled (a bug or a lock held by a hung client,
# never a normal query here), and a client idle inside a transaction (a paused coordinator
# holding a study's row lock) is disconnected, so one stuck process cannot stall the rest.
PG_STATEMENT_TIMEOUT_MS = 60_000
PG_IDLE_IN_TRANSACTION_TIMEOUT_MS = 120_000
# TCP keepalives: a connection whose peer vanished (failover, a dropped NAT entry) is noticed
# in about idle + interval x count = 60 s instead of the kernel's two hours.
PG_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}
READ_ONLY = "autotuner_read_only"  # execution option: a transaction that only reads
SQLITE_BUSY_TIMEOUT_MS = 30_000


class DatabaseUnavailable(RuntimeError):
    """The database cannot be reached or opened; the message says what to do about it."""


# --------------------------------------------------------------------------- engines

_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


def get_engine(url: str) -> Engine:
    """The process-wide engine for `url` (created on first use, then cached)."""
    url = normalize_url(url)
    with _engines_lock:
        engine = _engines.get(url)
        if engine is None:
            engine = _engines[url] = _create_engine(url)
        return engine


def dispose_engines() -> None:
    """Close every cached engine's connections (tests; after a fork)."""
    with _engines_lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()


def _create_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        memory = parsed.database in (None, "", ":memory:")
        engine = create_engine(
            url,
            json_serializer=json_dumps,
            # orjson reads JSON 3-4x faster than the standard library (a study's 10,000 trials'
            # params are read at its end); what the database holds is strict JSON (JSONB, and
            # json_dumps, reject NaN), which both read alike.
            json_deserializer=orjson.loads,
            # One shared connection for :memory: (each new connection would be a new database).
            poolclass=StaticPool if memory else None,
            connect_args={"check_same_thread": False},
        )
        configure_sqlite(engine, foreign_keys=True)
        return engine
    connect_args: dict[str, Any] = {}
    if parsed.get_backend_name() == "postgresql":
        connect_args.update({k: v for k, v in PG_KEEPALIVES.items() if k not in parsed.query})
        if "connect_timeout" not in parsed.query:
            connect_args["connect_timeout"] = PG_CONNECT_TIMEOUT_S
        if "options" not in parsed.query:
            connect_args["options"] = (
                f"-c statement_timeout={PG_STATEMENT_TIMEOUT_MS} "
                f"-c idle_in_transaction_session_timeout={PG_IDLE_IN_TRANSACTION_TIMEOUT_MS}"
            )
    return create_engine(
        url,
        json_serializer=json_dumps,
        json_deserializer=orjson.loads,  # see the SQLite engine's
        pool_pre_ping=True,
        connect_args=connect_args,
    )


def configure_sqlite(engine: Engine, *, foreign_keys: bool) -> None:
    """WAL, a busy timeout, and BEGIN IMMEDIATE for every transaction.

    pysqlite opens transactions lazily (deferred), so two writers that both read first can
    deadlock on the upgrade to a write lock and one fails at once with "database is locked".
    Taking the write lock at BEGIN serialises writers cleanly; WAL keeps readers of other
    processes unblocked. Migrations pass foreign_keys=False: batch mode copies and drops tables,
    which with foreign keys ON would cascade deletes.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (below)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        _enable_wal(cursor)
        cursor.execute("PRAGMA synchronous = NORMAL")  # durable enough with WAL, much faster
        cursor.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # A read-only transaction takes no write lock: with WAL it sees a consistent snapshot
        # while a writer works, and never waits for one.
        read_only = connection.get_execution_options().get(READ_ONLY, False)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def _enable_wal(cursor: Any) -> None:
    """Switch the file to WAL (a persistent property of the file: usually already done).

    Switching needs an exclusive lock, and SQLite answers "database is locked" at once rather
    than waiting on the busy timeout when several processes open a new file together (seen in
    CI with four concurrent migrations): retry for a while instead.
    """
    import sqlite3  # here: a Postgres process never loads the SQLite driver

    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def json_dumps(value: Any) -> str:
    """JSON for the database. NaN and infinities become null: Postgres JSONB rejects them."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


# --------------------------------------------------------------------------- Database


class Database:
    """One database: a cached engine and transactional sessions over it."""

    def __init__(self, url: str) -> None:
        self.url = normalize_url(url)
        self.engine = get_engine(self.url)
        self._makers: tuple[sessionmaker[Session], sessionmaker[Session]] | None = None

    def _sessionmakers(self) -> tuple[sessionmaker[Session], sessionmaker[Session]]:
        """(writers, readers), made on first use: the ORM is imported by a process that
        opens a session, not by one whose reads use the tables alone (`reading`)."""
        if self._makers is None:
            from sqlalchemy.orm import sessionmaker

            # Every session counts its trial writes in the study's trials version (the
            # module's flush hook, registered on import).
            from autotuner.storage import trial_versions  # noqa: F401

            # expire_on_commit=False: objects stay readable after their transaction ends.
            self._makers = (
                sessionmaker(self.engine, expire_on_commit=False),
                sessionmaker(
                    self.engine.execution_options(**{READ_ONLY: True}), expire_on_commit=False
                ),
            )
        return self._makers

    @classmethod
    def open(cls, url: str, *, migrate: bool = True) -> Database:
        """Check the database answers, then (by default) bring its schema to the latest revision."""
        db = cls(url)
        db.check()
        if migrate:
            upgrade_database(db.url)
        return db

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction: commits when the block ends, rolls back if it raises."""
        with self._sessionmakers()[0]() as session, session.begin():
            yield session

    @contextmanager
    def read(self) -> Iterator[Session]:
        """One transaction that only reads (rolled back at the end; a write in it is a bug).

        On SQLite it does not take the write lock; on Postgres it is READ ONLY."""
        # Closing (not rolling back) ends the transaction without expiring what was read:
        # the objects stay readable after the block, as with session().
        with self._sessionmakers()[1]() as session:
            if not self.is_sqlite:
                session.execute(text("SET TRANSACTION READ ONLY"))
            yield session

    @contextmanager
    def session_on(self, connection: Connection) -> Iterator[Session]:
        """ORM objects in the transaction of `connection` (one of `reading`'s): a read that
        began on the tables and needs whole studies or trials goes on, on one connection."""
        from sqlalchemy.orm import Session

        self._sessionmakers()  # the trials-version hook, as every session has it
        with Session(bind=connection, expire_on_commit=False) as session:
            yield session

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """`read` on a Core connection: one transaction that only reads, for the reads of
        storage/reads.py (rows of the tables, no ORM objects, no ORM imported)."""
        # The transaction begins with the first statement and is rolled back when the
        # connection goes back to the pool.
        with self.engine.execution_options(**{READ_ONLY: True}).connect() as connection:
            if not self.is_sqlite:
                connection.execute(text("SET TRANSACTION READ ONLY"))
            yield connection

    def check(self) -> None:
        """Connect once; raise DatabaseUnavailable with a remedy if that fails."""
        try:
            with self.engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except exc.DBAPIError as error:
            raise DatabaseUnavailable(_explain(self.url, error)) from error

    def check_schema(self) -> None:
        """For readers: the database exists and its schema is this version's; else a remedy.

        Unlike `check()`, this never creates an SQLite file: reading from a database that no
        study has written to yet is a mistake to explain, not an empty file to leave behind.
        """
        url = make_url(self.url)
        file = url.database if url.get_backend_name() == "sqlite" else None
        if file not in (None, "", ":memory:") and not Path(str(file)).exists():
            raise DatabaseUnavailable(
                f"no autotuner results at {file} yet: run `autotuner tune SPEC` "
                f"(or `autotuner serve`) to create them, or {_REMEDY} to read another database"
            )
        self.check()
        head = SCHEMA_REVISION
        try:
            with self.engine.connect() as connection:
                current = connection.execute(text("SELECT version_num FROM alembic_version"))
                revisions = {row[0] for row in current}
        except exc.DBAPIError:
            revisions = set()
        if not revisions:
            raise DatabaseUnavailable(
                f"the database at {redact(self.url)} has no autotuner tables: run "
                f"`alembic -x db=URL upgrade head`, or `autotuner tune`/`autotuner serve`, which "
                f"create them; or {_REMEDY} to read another database"
            )
        if head not in revisions:
            raise DatabaseUnavailable(
                f"the database at {redact(self.url)} is at schema revision "
                f"{', '.join(sorted(revisions))} but this autotuner needs {head}: run "
                f"`alembic -x db=URL upgrade head` (or start `autotuner serve`, which migrates)"
            )

    def __repr__(self) -> str:
        return f"Database({redact(self.url)!r})"


def _explain(url: str, error: exc.DBAPIError) -> str:
    parsed = make_url(url)
    shown = redact(parsed)
    detail = str(error.orig or error).strip()
    lower = detail.lower()
    if parsed.get_backend_name() == "sqlite":
        first = detail.splitlines()[0] if detail else "unknown error"
        return (
            f"cannot open the SQLite database at {shown}: {first}; "
            f"check that its folder exists and is writable, or {_REMEDY}"
        )
    where = f"{parsed.host or 'localhost'}:{parsed.port or 5432}"
    prefix = f"cannot reach the database at {shown}"
    if "refused" in lower:
        return f"{prefix}: connection refused; is PostgreSQL running at {where}? {_REMEDY}"
    if "timeout" in lower or "timed out" in lower:
        return (
            f"{prefix}: no answer within {PG_CONNECT_TIMEOUT_S} s; is {where} reachable and "
            f"PostgreSQL listening there? {_REMEDY}"
        )
    if "does not exist" in lower and "database" in lower:
        return (
            f"{prefix}: database {parsed.database!r} does not exist; create it "
            f"(createdb -h {parsed.host or 'localhost'} -U {parsed.username or 'postgres'} "
            f"{parsed.database}) or {_REMEDY}"
        )
    if "authentication failed" in lower or "no password supplied" in lower:
        return (
            f"{prefix}: authentication failed for user {parsed.username!r}; "
            f"check the user and password in the URL, or {_REMEDY}"
        )
    if "resolve" in lower or "name or service not known" in lower or "nodename" in lower:
        return f"{prefix}: unknown host {parsed.host!r}; check the host in the URL, or {_REMEDY}"
    first = detail.splitlines()[0] if detail else type(error.orig).__name__
    return f"{prefix}: {first}; {_REMEDY}"
