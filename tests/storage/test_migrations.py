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


def test_0002_backfills_the_list_columns_from_the_result_json(empty_url: str) -> None:
    """Trials written before 0002 get tokens_per_s_min/max and wall_s from their result."""
    import datetime as dt
    import json

    from sqlalchemy import text

    config = alembic_config(empty_url)
    command.upgrade(config, "0001")
    now = dt.datetime.now(dt.UTC)
    result = {
        "status": "ok",
        "tokens_per_s": 100.0,
        "tokens_per_s_min": 98.5,
        "tokens_per_s_max": 101,
        "wall_s": 12.25,
    }
    failed = {"status": "failed", "failure_class": "oom", "wall_s": "n/a"}
    engine = create_engine(normalize_url(empty_url), poolclass=NullPool)
    try:
        with engine.begin() as c:
            c.execute(
                text(
                    "INSERT INTO studies (id, name, status, model_spec, space, objective, "
                    "gpus_per_trial, sampler, seed, options, created_at) VALUES ('st-1', 's', "
                    "'running', '{}', '{}', 'tokens_per_s', 1, 'tpe', 0, '{}', :now)"
                ),
                {"now": now},
            )
            for number, stored in enumerate([result, failed, None]):
                c.execute(
                    text(
                        "INSERT INTO trials (study_id, number, state, purpose, attempt, params, "
                        "config, result, created_at, retried) VALUES ('st-1', :n, 'complete', "
                        "'search', 1, '{}', '{}', :result, :now, false)"
                    ),
                    {"n": number, "result": json.dumps(stored) if stored else None, "now": now},
                )
        command.upgrade(config, "head")
        with engine.connect() as c:
            rows = c.execute(
                text(
                    "SELECT number, tokens_per_s_min, tokens_per_s_max, wall_s FROM trials "
                    "ORDER BY number"
                )
            ).all()
    finally:
        engine.dispose()
    assert [tuple(r) for r in rows] == [
        (0, 98.5, 101.0, 12.25),
        (1, None, None, None),  # a string where a number should be is not copied
        (2, None, None, None),  # no result
    ]
    assert _diff(empty_url) == []


def test_0003_backfills_the_global_batch_and_the_memory_columns(empty_url: str) -> None:
    """Trials written before 0003 get their global batch (the worker's count, else from the
    config), their memory record and their input wait from their JSON."""
    import datetime as dt
    import json

    from sqlalchemy import text

    config = alembic_config(empty_url)
    command.upgrade(config, "0002")
    now = dt.datetime.now(dt.UTC)
    run = {
        "knobs": {"micro_batch_size": 8, "grad_accum": 4},
        "model": {"seq_len": 512},
        "num_gpus": 2,
    }
    result = {
        "status": "ok",
        "tokens_per_s": 100.0,
        "tokens_per_step": 65536,
        "peak_mem_gib": 40.0,
        "peak_reserved_gib": 44.5,
        "peak_mem_with_eval_ckpt_gib": 41,
        "peak_reserved_with_eval_ckpt_gib": 46.0,
        "memory_kind": "cuda",
        "memory_limit_gib": 79.6,
        "input_wait_share": 0.25,
    }
    no_count = {"status": "failed", "failure_class": "oom", "memory_kind": 3, "peak_mem_gib": "x"}
    rows = [
        (run, result),  # the worker's count wins over the config's (32,768)
        (run, no_count),  # from the config: 8 x 4 x 2 GPUs x 512; nothing else is a number
        ({"knobs": {}, "model": {"seq_len": 128}}, None),  # defaults: 1 x 1 x 1 x 128
        ({}, None),  # no config: unknown
    ]
    engine = create_engine(normalize_url(empty_url), poolclass=NullPool)
    try:
        with engine.begin() as c:
            c.execute(
                text(
                    "INSERT INTO studies (id, name, status, model_spec, space, objective, "
                    "gpus_per_trial, sampler, seed, options, created_at) VALUES ('st-1', 's', "
                    "'running', '{}', '{}', 'tokens_per_s', 1, 'tpe', 0, '{}', :now)"
                ),
                {"now": now},
            )
            for number, (stored_config, stored) in enumerate(rows):
                c.execute(
                    text(
                        "INSERT INTO trials (study_id, number, state, purpose, attempt, params, "
                        "config, result, created_at, retried) VALUES ('st-1', :n, 'complete', "
                        "'search', 1, '{}', :config, :result, :now, false)"
                    ),
                    {
                        "n": number,
                        "config": json.dumps(stored_config),
                        "result": json.dumps(stored) if stored else None,
                        "now": now,
                    },
                )
        command.upgrade(config, "head")
        with engine.connect() as c:
            got = c.execute(
                text(
                    "SELECT global_batch_tokens, peak_reserved_gib, peak_mem_with_eval_ckpt_gib, "
                    "peak_reserved_with_eval_ckpt_gib, memory_kind, memory_limit_gib, "
                    "input_wait_share FROM trials ORDER BY number"
                )
            ).all()
    finally:
        engine.dispose()
    assert [tuple(r) for r in got] == [
        (65536, 44.5, 41.0, 46.0, "cuda", 79.6, 0.25),
        (32768, None, None, None, None, None, None),
        (128, None, None, None, None, None, None),
        (None, None, None, None, None, None, None),
    ]
    assert _diff(empty_url) == []


def test_0004_backfills_the_study_device_type_from_its_newest_trial(empty_url: str) -> None:
    """A study written before 0004 gets the device kind its newest trial ran on (num_gpus 0:
    a CPU-only cluster); one without trials, or whose config has no num_gpus, stays unknown."""
    import datetime as dt
    import json

    from sqlalchemy import text

    config = alembic_config(empty_url)
    command.upgrade(config, "0003")
    now = dt.datetime.now(dt.UTC)
    trials = {
        "st-cpu": [{"num_gpus": 0}],
        "st-moved": [{"num_gpus": 0}, {"num_gpus": 2}],  # a GPU node joined: the newest counts
        "st-none": [],
        "st-odd": [{"num_gpus": "two"}, {}],
    }
    engine = create_engine(normalize_url(empty_url), poolclass=NullPool)
    try:
        with engine.begin() as c:
            for study_id, configs in trials.items():
                c.execute(
                    text(
                        "INSERT INTO studies (id, name, status, model_spec, space, objective, "
                        "gpus_per_trial, sampler, seed, options, created_at) VALUES (:id, 's', "
                        "'running', '{}', '{}', 'tokens_per_s', 1, 'tpe', 0, '{}', :now)"
                    ),
                    {"id": study_id, "now": now},
                )
                for number, stored in enumerate(configs):
                    c.execute(
                        text(
                            "INSERT INTO trials (study_id, number, state, purpose, attempt, "
                            "params, config, created_at, retried) VALUES (:id, :n, 'complete', "
                            "'search', 1, '{}', :config, :now, false)"
                        ),
                        {"id": study_id, "n": number, "config": json.dumps(stored), "now": now},
                    )
        command.upgrade(config, "head")
        with engine.connect() as c:
            got = dict(c.execute(text("SELECT id, device_type FROM studies")).all())
    finally:
        engine.dispose()
    assert got == {"st-cpu": "cpu", "st-moved": "cuda", "st-none": None, "st-odd": None}
    assert _diff(empty_url) == []


def test_0005_backfills_stopped_early_from_the_result_json(empty_url: str) -> None:
    """Trials written before 0005 get `stopped_early` from their result: true only where the
    JSON holds the boolean true; a trial written after it without the column gets false."""
    import datetime as dt
    import json

    from sqlalchemy import text

    config = alembic_config(empty_url)
    command.upgrade(config, "0004")
    now = dt.datetime.now(dt.UTC)
    results = [
        {"status": "ok", "tokens_per_s": 10.0, "stopped_early": True},
        {"status": "ok", "tokens_per_s": 20.0, "stopped_early": False},
        {"status": "ok", "tokens_per_s": 30.0},  # written before the flag existed
        {"status": "ok", "stopped_early": "true"},  # not a boolean: not stopped early
        None,  # still running
    ]
    insert_trial = text(
        "INSERT INTO trials (study_id, number, state, purpose, attempt, params, config, "
        "result, created_at, retried) VALUES ('st-1', :n, 'complete', 'search', 1, '{}', '{}', "
        ":result, :now, false)"
    )
    engine = create_engine(normalize_url(empty_url), poolclass=NullPool)
    try:
        with engine.begin() as c:
            c.execute(
                text(
                    "INSERT INTO studies (id, name, status, model_spec, space, objective, "
                    "gpus_per_trial, sampler, seed, options, created_at) VALUES ('st-1', 's', "
                    "'running', '{}', '{}', 'tokens_per_s', 1, 'tpe', 0, '{}', :now)"
                ),
                {"now": now},
            )
            for number, stored in enumerate(results):
                result = json.dumps(stored) if stored else None
                c.execute(insert_trial, {"n": number, "result": result, "now": now})
        command.upgrade(config, "head")
        with engine.begin() as c:
            c.execute(insert_trial, {"n": len(results), "result": None, "now": now})
            got = c.execute(text("SELECT stopped_early FROM trials ORDER BY number")).scalars()
            flags = list(got)
    finally:
        engine.dispose()
    assert flags == [True, False, False, False, False, False]
    assert _diff(empty_url) == []


def test_0007_marks_trial_0_and_its_retries_as_the_expert_default(empty_url: str) -> None:
    """Before 0007 the expert default was trial #0 when a seed: its rows (and its retries')
    become `expert-default`; other seeds, search trials, and a study that ran no expert seed
    (its #0 a history seed) keep theirs; downgrading gives the seeds back."""
    import datetime as dt

    from sqlalchemy import text

    config = alembic_config(empty_url)
    command.upgrade(config, "0006")
    now = dt.datetime.now(dt.UTC)
    insert_study = text(
        "INSERT INTO studies (id, name, status, model_spec, space, objective, gpus_per_trial, "
        "sampler, seed, options, created_at) VALUES (:id, 's', 'running', '{}', '{}', "
        "'tokens_per_s', 1, 'tpe', 0, :options, :now)"
    )
    insert_trial = text(
        "INSERT INTO trials (study_id, number, state, purpose, attempt, params, config, "
        "created_at, retried, retry_of) VALUES (:study, :n, 'complete', :purpose, 1, '{}', '{}', "
        ":now, false, :retry_of)"
    )
    rows = {
        # study: (purpose, retry_of) by trial number
        "st-on": [("seed", None), ("seed", 0), ("seed", None), ("search", None)],
        "st-off": [("seed", None), ("search", None)],  # options: expert_seed off
        "st-search": [("search", None), ("seed", None)],  # #0 not a seed
    }
    engine = create_engine(normalize_url(empty_url), poolclass=NullPool)
    try:
        with engine.begin() as c:
            for study, trials in rows.items():
                options = '{"expert_seed": false}' if study == "st-off" else "{}"
                c.execute(insert_study, {"id": study, "options": options, "now": now})
                for number, (purpose, retry_of) in enumerate(trials):
                    c.execute(
                        insert_trial,
                        {
                            "study": study,
                            "n": number,
                            "purpose": purpose,
                            "retry_of": retry_of,
                            "now": now,
                        },
                    )
        read = text("SELECT study_id, number, purpose FROM trials ORDER BY study_id, number")
        command.upgrade(config, "head")
        with engine.connect() as c:
            up = [tuple(r) for r in c.execute(read)]
        command.downgrade(config, "0006")
        with engine.connect() as c:
            down = [tuple(r) for r in c.execute(read)]
    finally:
        engine.dispose()
    assert up == [
        ("st-off", 0, "seed"),
        ("st-off", 1, "search"),
        ("st-on", 0, "expert-default"),
        ("st-on", 1, "expert-default"),  # the retry of #0
        ("st-on", 2, "seed"),
        ("st-on", 3, "search"),
        ("st-search", 0, "search"),
        ("st-search", 1, "seed"),
    ]
    assert [p for *_, p in down] == [
        "seed",
        "search",
        "seed",
        "seed",
        "seed",
        "search",
        "search",
        "seed",
    ]


def test_the_schema_revision_readers_check_is_alembics_head() -> None:
    """Readers compare the database's revision with SCHEMA_REVISION instead of loading
    Alembic's scripts: it must be the newest migration's."""
    from autotuner.storage.migrate import SCHEMA_REVISION, _head_revision

    assert _head_revision() == SCHEMA_REVISION
