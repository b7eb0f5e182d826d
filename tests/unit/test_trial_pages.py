"""Trial lists page by trial number (keyset), reading only the rows asked for; `autotuner
trials` shows the most recent ones by default."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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
    # What `autotuner trials` reads, in one transaction: the study, its count, the newest.
    study, total, newest = trial_reads.last_trials(db, study_id, 3)
    assert study["id"] == study_id and total == 7 and [t["number"] for t in newest] == [4, 5, 6]
    assert newest == trial_reads.list_trials(db, study_id, after=3)
    assert len(trial_reads.last_trials(db, study_id, None)[2]) == 7
    assert len(trial_reads.last_trials(db, study_id, 7)[2]) == 7


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


def _api(url: str) -> Any:
    from fastapi.testclient import TestClient

    from autotuner.api.app import ServiceSettings, create_app

    return TestClient(create_app(ServiceSettings(db_url=url, coordinator=False, migrate=False)))


def test_the_api_pages_trials_by_default(sqlite_url: str, monkeypatch: Any) -> None:
    """`trials` without a limit answers a first page and where the next one is, never the
    whole study; the pages, followed, are every trial once, in order."""
    study_id = _study_with_trials(sqlite_url, 7)
    monkeypatch.setattr(trial_reads, "PAGE_SIZE", 3)
    with _api(sqlite_url) as client:
        first = client.get(f"/api/studies/{study_id}/trials")
        assert first.status_code == 200
        assert [t["number"] for t in first.json()] == [0, 1, 2]
        assert first.headers["X-Next-After"] == "2"
        seen, response = [], first
        while True:
            seen += [t["number"] for t in response.json()]
            if "next" not in response.links:
                break
            response = client.get(response.links["next"]["url"])
        assert seen == list(range(7))
        assert "X-Next-After" not in response.headers  # the last page says no more
        # An explicit limit is kept in the next page's link; a page that ends the study
        # exactly has no next link.
        two = client.get(f"/api/studies/{study_id}/trials?after=0&limit=2")
        assert [t["number"] for t in two.json()] == [1, 2]
        assert "limit=2" in two.links["next"]["url"] and "after=2" in two.links["next"]["url"]
        last = client.get(f"/api/studies/{study_id}/trials?after=4&limit=2")
        assert [t["number"] for t in last.json()] == [5, 6] and "next" not in last.links


def test_the_cli_backend_follows_the_pages(sqlite_url: str, monkeypatch: Any) -> None:
    """`autotuner trials --server` reads the pages one after another where it needs every
    trial (`--all`), and stops once it has `limit`."""
    from autotuner.cli.client import ServiceClient

    study_id = _study_with_trials(sqlite_url, 7)
    monkeypatch.setattr(trial_reads, "PAGE_SIZE", 3)
    with _api(sqlite_url) as client:
        service = ServiceClient("http://testserver")
        service._http = client
        assert [t["number"] for t in service.trials(study_id)] == list(range(7))
        assert [t["number"] for t in service.trials(study_id, after=1)] == [2, 3, 4, 5, 6]
        assert [t["number"] for t in service.trials(study_id, limit=4)] == [0, 1, 2, 3]
        assert [t["number"] for t in service.trials(study_id, after=1, limit=2)] == [2, 3]
