"""Which database: the URL from `--db`, the environment or the default SQLite file, normalized
(the psycopg 3 driver for Postgres) and redacted for showing to a user."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs
from sqlalchemy import exc
from sqlalchemy.engine import URL, make_url

from autotuner.errors import UserError

ENV_VAR = "AUTOTUNER_DATABASE_URL"
_REMEDY = "set --db or AUTOTUNER_DATABASE_URL"


def resolve_database_url(cli_value: str | None) -> str:
    """The database URL: `--db` value > $AUTOTUNER_DATABASE_URL > the embedded SQLite file.

    `postgres://` and `postgresql://` become `postgresql+psycopg://`; a bare path means an SQLite
    file. The default file lives in the user data folder, which is created if missing.
    """
    for value in (cli_value, os.environ.get(ENV_VAR)):
        if value and value.strip():
            return normalize_url(value.strip())
    folder = Path(platformdirs.user_data_dir("autotuner"))
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'autotuner.db'}"


# The databases this tool runs on, by URL scheme (postgres:// and postgresql:// are rewritten).
SUPPORTED_SCHEMES = ("postgresql+psycopg", "sqlite", "sqlite+pysqlite")
URL_FORMS = "postgresql://user@host:5432/dbname, sqlite:///path/to/file.db, or a bare file path"


class UnsupportedDatabaseUrl(UserError):
    """A database URL this tool cannot use; the message lists the forms it takes."""


def normalize_url(url: str) -> str:
    """Pick the psycopg 3 driver for Postgres URLs; turn a bare file path into an SQLite URL.
    Any other scheme, or a URL that does not parse, is an `UnsupportedDatabaseUrl`."""
    if "://" not in url:
        return f"sqlite:///{Path(url).expanduser().resolve()}"
    scheme, rest = url.split("://", 1)
    if scheme in ("postgres", "postgresql"):
        url = f"postgresql+psycopg://{rest}"
    elif scheme not in SUPPORTED_SCHEMES:
        raise UnsupportedDatabaseUrl(
            f"database URL scheme {scheme[:40]!r} is not supported; use {URL_FORMS} ({_REMEDY})"
        )
    try:
        make_url(url)
    except (exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise UnsupportedDatabaseUrl(
            f"database URL {redact_unparsed(url)!r} does not parse; use {URL_FORMS}"
        ) from None
    return url


def redact_unparsed(url: str) -> str:
    """A URL that did not parse, with anything between '://' and '@' masked."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rsplit('@', 1)[1]}" if "@" in rest else url


def redact(url: str | URL) -> str:
    """The URL as it may be shown to a user: the password masked."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except exc.ArgumentError:
        return str(url)
