"""The migrations create exactly the schema the models describe, and run safely in parallel."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, create_engine, inspect
from sqlalchemy.pool import NullPool

from autotuner.storage.models import Base
from autotuner.storage.session import alembic_config, normalize_url, upgrade_database

REPO = Path(__file__).resolve().parents[2]


def _diff(url: str, metadata: MetaData = Base.metadata) -> list[Any]:
    engine = create_engine(normalize_url(url), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = create_engine(normalize_url(url), poolclass=NullPool)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    return str(request.getfixturevalue("pg_empty_url"))


def test_upgrade_head_matches_the_models(empty_url: str) -> None:
    upgrade_database(empty_url)
    assert _diff(empty_url) == []


def test_the_drift_check_sees_a_difference(empty_url: str) -> None:
    upgrade_database(empty_url)
    changed = MetaData(naming_convention=Base.metadata.naming_convention)
    for table in Base.metadata.sorted_tables:
        table.to_metadata(changed)
    changed.tables["trials"].append_column(Column("surprise", Integer))
    diff = _diff(empty_url, changed)
    assert [entry[0] for entry in diff] == ["add_column"]


def test_downgrade_to_base_and_back(empty_url: str) -> None:
    config = alembic_config(empty_url)
    command.upgrade(config, "head")
    command.downgrade(config, "base")
    assert _tables(empty_url) <= {"alembic_version"}
    command.upgrade(config, "head")
    assert {"studies", "trials"} <= _tables(empty_url)
    assert _diff(empty_url) == []


def _upgrade_together(url: str, barrier: Any) -> None:
    barrier.wait(timeout=60)
    upgrade_database(url)


def test_concurrent_upgrades_from_several_processes(empty_url: str) -> None:
    # Without the migration lock the losers fail with "relation already exists".
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_upgrade_together, args=(empty_url, barrier)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=90)
    assert [proc.exitcode for proc in procs] == [0, 0, 0, 0]
    assert _diff(empty_url) == []


def test_alembic_command_line_takes_the_url_from_x_db(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNER_DATABASE_URL"}
    done = subprocess.run(
        [sys.executable, "-m", "alembic", "-x", f"db={url}", "upgrade", "head"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert _diff(url) == []


def test_alembic_ini_names_no_database() -> None:
    ini = (REPO / "alembic.ini").read_text()
    assert "sqlalchemy.url" not in ini
