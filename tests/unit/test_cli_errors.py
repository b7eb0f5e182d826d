"""Bad input gives one clear error line, a non-zero exit, and writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("AUTOTUNER_DATABASE_URL", None)
    full_env.pop("AUTOTUNER_SERVER", None)
    return subprocess.run(
        [sys.executable, "-m", "autotuner.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=full_env,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("files", "args", "needle"),
    [
        ({"m.yaml": "preset: tiny\nseq_len: [1, 2\n"}, ["m.yaml"], "malformed YAML"),
        ({"m.yaml": "preset: tiny\nlayers: 3\n"}, ["m.yaml"], "layers: unknown field"),
        (
            {"m.yaml": "preset: tiny\n", "s.yaml": "name: s\nknobs: {micro_batch: [1]}\n"},
            ["m.yaml", "--space", "s.yaml"],
            "knobs.micro_batch: unknown knob",
        ),
        (
            {"m.yaml": "preset: tiny\n", "s.yaml": "name: s\nknobs: {precision: [bf16, fp12]}\n"},
            ["m.yaml", "--space", "s.yaml"],
            "'fp12' is not a valid precision",
        ),
        ({"m.yaml": "preset: tiny\n"}, ["m.yaml", "--space", "nope"], "no search space 'nope'"),
        ({"m.yaml": "preset: tiny\n"}, ["m.yaml", "--sampler", "bayes"], "--sampler 'bayes'"),
        ({}, ["missing.yaml"], "missing.yaml: no such file"),
        (
            {"m.yaml": "preset: tiny\n"},
            ["m.yaml", "--objective", "time_to_train"],
            "--planned-tokens",
        ),
        (
            {"m.yaml": "preset: tiny\n"},
            ["m.yaml", "--objective", "mtokens_per_usd"],
            "--usd-per-gpu-hour",
        ),
        ({"m.yaml": "preset: tiny\n"}, ["m.yaml", "--option", "remeasure_top"], "KEY=VALUE"),
        ({"m.yaml": "preset: tiny\n"}, ["m.yaml", "--option", "nope=1"], "no such option"),
        ({"m.yaml": "preset: tiny\n"}, ["m.yaml", "--option", "headroom=0"], "--headroom"),
        (
            {"m.yaml": "preset: tiny\n"},
            ["m.yaml", "--option", "remeasure_top=1", "--option", "remeasure_top=2"],
            "given twice",
        ),
        (
            {"m.yaml": "preset: tiny\n"},
            ["m.yaml", "--option", "numerics_check=maybe"],
            "--option numerics_check=maybe: Input should be a valid boolean",
        ),
        (  # tiny: seq_len 64; cpu-demo's micro-batches are 1..32: none divides 1000 tokens
            {"m.yaml": "preset: tiny\n"},
            ["m.yaml", "--space", "cpu-demo", "--global-batch", "1000"],
            "--global-batch 1,000: no micro_batch_size of the space",
        ),
    ],
)
def test_tune_rejects_bad_input_and_writes_nothing(
    tmp_path: Path, files: dict[str, str], args: list[str], needle: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    db_file = tmp_path / "results.db"
    resolved = [str(tmp_path / a) if a in files or a.endswith(".yaml") else a for a in args]
    proc = run_cli("tune", *resolved, "--db", f"sqlite:///{db_file}", "--trials", "1")
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:") and needle in lines[0], lines[0]
    assert not db_file.exists(), "a rejected command must not create the database"


def test_tune_checks_the_data_before_starting_anything(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text("preset: tiny\n")
    (tmp_path / "tokens.bin").write_bytes(b"\x00" * 101)  # not whole uint16 tokens
    db_file = tmp_path / "results.db"
    for data, needle in (
        ("missing.bin", "missing.bin: no such file or directory"),
        ("tokens.bin", "101 bytes is not a whole number of uint16 tokens"),
    ):
        proc = run_cli(
            "tune",
            str(tmp_path / "m.yaml"),
            "--space",
            "cpu-demo",
            "--data",
            str(tmp_path / data),
            "--db",
            f"sqlite:///{db_file}",
        )
        assert proc.returncode == 2, proc.stderr
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], lines
    assert not db_file.exists(), "a rejected command must not create the database"


def test_unreachable_database_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text("preset: tiny\n")
    url = "postgresql+psycopg://postgres@127.0.0.1:5999/autotuner"
    proc = run_cli("tune", str(tmp_path / "m.yaml"), "--space", "cpu-demo", "--db", url)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "127.0.0.1:5999" in lines[0], proc.stderr


def test_unknown_study_says_how_to_find_one(tmp_path: Path) -> None:
    from autotuner.storage.session import upgrade_database

    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade_database(url)
    proc = run_cli("best", "st-doesnotexist", "--db", url)
    assert proc.returncode == 2
    assert "st-doesnotexist" in proc.stderr


def test_reading_a_database_no_study_wrote_explains_and_creates_nothing(tmp_path: Path) -> None:
    db_file = tmp_path / "never.db"
    for args in (["status"], ["best", "st-1234"], ["trials", "st-1234"]):
        proc = run_cli(*args, "--db", f"sqlite:///{db_file}")
        assert proc.returncode == 2, proc.stderr
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "no autotuner results at" in lines[0], proc.stderr
    assert not db_file.exists()


@pytest.mark.postgres
def test_reading_an_unmigrated_database_says_how_to_migrate(pg_empty_url: str) -> None:
    proc = run_cli("status", "--db", pg_empty_url)
    assert proc.returncode == 2, proc.stderr
    assert "has no autotuner tables" in proc.stderr and "upgrade head" in proc.stderr


def test_reading_an_older_schema_says_how_to_upgrade(tmp_path: Path) -> None:
    import sqlite3

    from autotuner.storage.session import upgrade_database

    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade_database(url)
    with sqlite3.connect(tmp_path / "old.db") as conn:  # pretend an older release wrote it
        conn.execute("UPDATE alembic_version SET version_num = '0000_older'")
    proc = run_cli("status", "--db", url)
    assert proc.returncode == 2
    assert "schema revision 0000_older" in proc.stderr and "upgrade head" in proc.stderr


def test_submit_stores_what_option_sets(tmp_path: Path) -> None:
    """`--option KEY=VALUE` reaches the stored study, typed (YAML scalars), beside the flags."""
    import json
    import sqlite3

    db_file = tmp_path / "results.db"
    proc = run_cli(
        "submit", "examples/tiny.yaml", "--space", "cpu-demo", "--db", f"sqlite:///{db_file}",
        "--option", "remeasure_top=0", "--option", "numerics_check=false", "--headroom", "0.2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(db_file) as conn:
        (stored,) = conn.execute("SELECT options FROM studies").fetchone()
    assert json.loads(stored) == {"remeasure_top": 0, "numerics_check": False, "headroom": 0.2}
