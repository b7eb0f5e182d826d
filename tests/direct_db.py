"""A test's own connection to a database a service or a seeding step wrote, read directly."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def direct_connection(db_url: str) -> Iterator[Any]:
    """A connection of the test's own to the database at `db_url` (no pool left behind)."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    engine = create_engine(db_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            yield connection
    finally:
        engine.dispose()
