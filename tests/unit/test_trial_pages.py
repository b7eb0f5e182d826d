"""Trial lists page by trial number (keyset), reading only the rows asked for; `autotuner
trials` shows the most recent ones by default."""

from __future__ import annotations

import re
from pathlib import Path

from autotuner.search.space import load_space
from autotuner.spec import ModelSpec
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study import trial_reads
from autotuner.study.coordinator import create_study
from tests.unit.test_cli_errors import run_cli


def _study_with_trials(url: str, n: int) -> str:
    db = Database(url)
    study_id = create_study(
        db, model=ModelSpec.resolve({"preset": "tiny"}), space=load_space("cpu-demo"), max_trials=n
    )
    with db.session() as s:
        for i in range(n):
            TrialRepo(s).create_pruned(
                study_id,
                params={"micro_batch_size": 2**i},
                config={},
                error_class="unsupported",
                error_message=f"pruned #{i}",
            )
    return study_id


def test_trials_page_by_number(sqlite_url: str) -> None:
    study_id = _study_with_trials(sqlite_url, 7)
    db = Database(sqlite_url)
    assert [t["number"] for t in trial_reads.list_trials(db, study_id)] == list(range(7))
    page = trial_reads.list_trials(db, study_id, after=2, limit=3)
    assert [t["number"] for t in page] == [3, 4, 5]
    assert [t["number"] for t in trial_reads.list_trials(db, study_id, after=5)] == [6]
    assert trial_reads.list_trials(db, study_id, after=6) == []  # polling: nothing new yet


def test_the_cli_shows_the_most_recent_trials(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    from autotuner.storage.session import upgrade_database

    upgrade_database(url)
    study_id = _study_with_trials(url, 6)
    proc = run_cli("trials", study_id, "--db", url, "--last", "2", env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    assert "the last 2 of 6 trials" in proc.stderr
    rows = [re.match(r"^\s*(\d+)\s+pruned\b", line) for line in proc.stdout.splitlines()]
    assert {int(m.group(1)) for m in rows if m} == {4, 5}, proc.stdout
    every = run_cli("trials", study_id, "--db", url, "--all", "--json")
    assert every.returncode == 0 and every.stdout.count('"number"') == 6
