"""The schema: Alembic migrations (the only way it is created), run from the application without
alembic.ini."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotuner.storage.urls import normalize_url


def migrations_dir() -> Path:
    import autotuner

    return Path(autotuner.__file__).resolve().parent.parent / "migrations"


def upgrade_database(url: str, revision: str = "head") -> None:
    """Run `alembic upgrade <revision>` on `url` (safe to run from several processes at once)."""
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def alembic_config(url: str) -> Any:
    """An Alembic config for `url` without alembic.ini (the URL travels in attributes, so a
    percent-encoded password is not mangled by configparser interpolation)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes["url"] = normalize_url(url)
    return config


# The schema revision this code reads and writes: the newest migration's. A reader checks the
# database's `alembic_version` against it (`Database.check_schema`) without loading Alembic's
# scripts (a fifth of a cold `autotuner status`); tests/storage/test_migrations.py checks that
# it is Alembic's head.
SCHEMA_REVISION = "0011"


def _head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(migrations_dir())).get_current_head()
    assert head is not None
    return head
