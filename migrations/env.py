"""Alembic environment: the autotuner models' metadata, one transaction, one migrator at a time.

The URL comes from the caller (`upgrade_database(url)` passes it in `config.attributes`), else
from `-x db=...`, else from $AUTOTUNER_DATABASE_URL, else the embedded SQLite default: the same
resolution the application uses, never a URL written in alembic.ini.
"""

from __future__ import annotations

from logging.config import fileConfig
from typing import Any, Literal

from alembic import context
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from autotuner.storage.models import Base, UtcDateTime
from autotuner.storage.session import (
    PG_CONNECT_TIMEOUT_S,
    configure_sqlite,
    resolve_database_url,
)
from autotuner.storage.tables import Jsonb

# Any fixed 64-bit number, the same in every process: pg_advisory_xact_lock(key) makes a second
# migrator wait until the first has committed, then it finds the schema at head and does nothing.
MIGRATION_LOCK_KEY = 0x6175746F74756E  # "autotun"

config = context.config
if config.config_file_name is not None:  # the alembic CLI; the application keeps its logging
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _url() -> str:
    given = config.attributes.get("url") or context.get_x_argument(as_dictionary=True).get("db")
    return resolve_database_url(given)


def _render_item(type_: str, obj: Any, autogen_context: Any) -> str | Literal[False]:
    # Keep generated revisions free of application imports: UtcDateTime is timestamptz.
    if type_ == "type" and isinstance(obj, UtcDateTime):
        return "sa.DateTime(timezone=True)"
    # Jsonb is Postgres's JSONB, its dialect imported on first use (storage/tables.py).
    if type_ == "type" and isinstance(obj, Jsonb):
        autogen_context.imports.add("from sqlalchemy.dialects import postgresql")
        return "postgresql.JSONB(none_as_null=True)"
    return False


def _configure(**kwargs: Any) -> None:
    context.configure(
        target_metadata=target_metadata,
        compare_type=True,
        render_item=_render_item,
        **kwargs,
    )


def _engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(url, poolclass=NullPool)
        # Foreign keys OFF: batch mode recreates tables, and a cascading drop would delete rows.
        configure_sqlite(engine, foreign_keys=False)
        return engine
    return create_engine(
        url, poolclass=NullPool, connect_args={"connect_timeout": PG_CONNECT_TIMEOUT_S}
    )


def _run(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    # SQLite DDL is transactional too; with BEGIN IMMEDIATE a second migrator waits its turn.
    _configure(connection=connection, render_as_batch=sqlite, transactional_ddl=True)
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
            )
        context.run_migrations()


def run_migrations_offline() -> None:
    url = _url()
    _configure(
        url=url,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=make_url(url).get_backend_name() == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = _engine(_url())
    try:
        with engine.connect() as connection:
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
