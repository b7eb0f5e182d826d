"""The private PostgreSQL server the outage tests use (tests/pgserver.py) does what it says."""

from __future__ import annotations

import socket

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.pgserver import PrivatePostgres


def _tables(url: str) -> set[str]:
    engine = create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            )
            return {row[0] for row in rows}
    finally:
        engine.dispose()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_private_postgres_is_migrated_stops_restarts_and_is_removed(
    private_postgres: PrivatePostgres,
) -> None:
    pg = private_postgres
    assert pg.port != 5432 and pg.url.endswith(f":{pg.port}/autotuner")
    assert {"studies", "trials", "alembic_version"} <= _tables(pg.url)
    assert pg.running()

    pg.stop()
    assert not pg.running() and not _listening(pg.port)
    with pytest.raises(Exception, match=r"(?i)connect"):
        _tables(pg.url)

    pg.start()
    assert {"studies", "trials"} <= _tables(pg.url)  # the data survives a restart
    pg.restart(down_s=0.5)
    assert pg.running() and {"studies", "trials"} <= _tables(pg.url)

    pg.destroy()
    assert not pg.root.exists() and not _listening(pg.port)
