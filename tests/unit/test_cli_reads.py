"""A cold read of a local database (`status`, `best`, `trials`, the list) imports neither the
ORM, the models nor pydantic: they were most of its time (issue 42: a read under 0.5 s). The
reads run on the Core tables (storage/reads.py), the flags are taken without Typer's pydantic
adapters (cli/plain_values.py), `best` draws the recommendation from its JSON, and `trials`
judges its rows by the study's stored headroom alone (no options model)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from autotuner.storage import Database, StudyRepo, StudyStatus
from tests.unit.test_cli_errors import REPO

# The stored recommendation's keys that `best` draws (study/recommendation.py's model).
RECOMMENDATION = {
    "trial_number": 4,
    "objective": "tokens_per_s",
    "objective_value": 1234.5,
    "params": {"micro_batch_size": 4},
    "knobs": {"micro_batch_size": 4, "precision": "bf16"},
    "model": {"preset": "tiny"},
    "tokens_per_s": 1234.5,
    "tokens_per_s_min": 1200.0,
    "tokens_per_s_max": 1250.0,
    "tokens_per_s_per_gpu": 1234.5,
    "mfu": None,
    "peak_mem_gib": 1.5,
    "compile_s": None,
    "fingerprint": None,
    "completed_trials": 3,
    "measurements": 2,
    "measured_trials": [2, 4],
    "noise_rel": 0.02,
    "runner_up": None,
    "pareto": [],
}
HEAVY = ("sqlalchemy.orm", "autotuner.storage.models", "pydantic", "autotuner.spec")


def _imported(*args: str) -> tuple[str, set[str]]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "autotuner.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    return proc.stdout, {line.split("|")[-1].strip() for line in lines if "|" in line}


@pytest.fixture
def ended(sqlite_url: str) -> tuple[str, str]:
    """An ended study with a stored recommendation, in a SQLite file."""
    with Database(sqlite_url).session() as s:
        repo = StudyRepo(s)
        study = repo.create(
            name="ended", model_spec={"preset": "tiny"}, space={}, max_trials=3, max_minutes=None
        )
        repo.set_status(study, StudyStatus.COMPLETED)
        study.recommendation = RECOMMENDATION
    return sqlite_url, study.id


@pytest.mark.parametrize(
    "verb", [["status", "ended"], ["status"], ["best", "ended"], ["trials", "ended"]]
)
def test_a_read_imports_no_orm_and_no_pydantic(ended: tuple[str, str], verb: list[str]) -> None:
    url, study_id = ended
    out, imported = _imported(*verb, "--db", url)
    assert study_id in out or "ended" in out
    if verb[0] == "best":
        assert "Recommended config" in out and "1,234" in out and "micro_batch_size" in out
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_the_check_sees_the_imports(ended: tuple[str, str]) -> None:
    # A re-judge reads the trials as ORM rows: it imports them (the check is not blind).
    url, _ = ended
    out, imported = _imported("best", "ended", "--db", url, "--headroom", "0.05")
    assert "no trial measured a throughput" in out
    assert "sqlalchemy.orm" in imported
