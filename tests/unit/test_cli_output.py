"""The read and export verbs as a person meets them: 80 columns, cancelled studies, bad paths."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from autotuner.storage.session import upgrade_database
from tests.unit.test_cli_errors import run_cli


def _one_error_line(proc: object) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]  # type: ignore[attr-defined]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr  # type: ignore[attr-defined]
    assert lines[0].startswith("error:") and "Traceback" not in lines[0]
    return lines[0]


def test_trials_fit_80_columns(finished_study: tuple[str, str]) -> None:
    url, study_id = finished_study
    proc = run_cli("trials", study_id, "--db", url, env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, proc.stdout
    assert "…" not in proc.stdout, proc.stdout  # nothing cut
    rows = [line for line in lines if line.strip()[:1].isdigit()]
    trials = json.loads(run_cli("trials", study_id, "--json", "--db", url).stdout)
    assert len(rows) == len(trials), proc.stdout  # one line per trial, no wrapped knobs
    assert all("mb=" in row for row in rows), proc.stdout  # the compact config, whole
    assert "dominated: dominated" not in proc.stdout


def test_unsupported_database_url_is_one_line_with_the_accepted_forms() -> None:
    line = _one_error_line(run_cli("status", "--db", "foo://bar"))
    assert "'foo'" in line and "postgresql://" in line and "sqlite:///" in line


@pytest.fixture
def cancelled_study(finished_study: tuple[str, str]) -> tuple[str, str]:
    """The finished study as if cancelled after its trials: the last one stopped by the cancel."""
    url, study_id = finished_study
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE studies SET status = 'cancelled'")
        conn.execute(
            "UPDATE trials SET state = 'failed', error_class = 'infra', "
            "error_message = 'cancelled with the study', tokens_per_s = NULL "
            "WHERE number = (SELECT max(number) FROM trials)"
        )
    return url, study_id


def test_a_cancelled_study_is_not_a_recommendation(cancelled_study: tuple[str, str]) -> None:
    url, study_id = cancelled_study
    best = run_cli("best", study_id, "--db", url, env={"COLUMNS": "120"})
    assert best.returncode == 0, best.stderr
    assert "Recommended config" not in best.stdout and "not a recommendation" in best.stdout
    assert "cancelled after" in best.stdout and "of 10 trials" in best.stdout

    refused = _one_error_line(run_cli("export", study_id, "--db", url))
    assert "cancelled after" in refused and "--allow-partial" in refused
    partial = run_cli("export", study_id, "--allow-partial", "--db", url)
    assert partial.returncode == 0, partial.stderr
    assert "cancelled after" in json.loads(partial.stdout)["partial"]
    env = run_cli("export", study_id, "-f", "env", "--allow-partial", "--db", url)
    assert "# CAUTION: study" in env.stdout

    trials = run_cli("trials", study_id, "--db", url, env={"COLUMNS": "80"})
    last = [line for line in trials.stdout.splitlines() if line.strip()[:1].isdigit()][-1]
    assert "cancelled" in last and "failed" not in last, trials.stdout


def test_export_output_paths(finished_study: tuple[str, str], tmp_path: Path) -> None:
    url, study_id = finished_study
    export = ["export", study_id, "--db", url, "-o"]
    assert "is a folder" in _one_error_line(run_cli(*export, str(tmp_path)))
    missing = tmp_path / "no" / "such" / "best.json"
    assert "does not exist" in _one_error_line(run_cli(*export, str(missing)))

    existing = tmp_path / "best.json"
    existing.write_text("keep me")
    assert "--force" in _one_error_line(run_cli(*export, str(existing)))
    assert existing.read_text() == "keep me"
    forced = run_cli(*export, str(existing), "--force")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(existing.read_text())["study"] == study_id

    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        assert "permission denied" in _one_error_line(run_cli(*export, str(locked / "b.json")))
    else:  # a folder even root cannot create files in
        assert "cannot write /proc/" in _one_error_line(run_cli(*export, "/proc/best.json"))


def test_the_dashboard_labels_the_trial_the_cancel_stopped(
    cancelled_study: tuple[str, str],
) -> None:
    from fastapi.testclient import TestClient

    from autotuner.storage.session import Database
    from tests.dashboard.conftest import make_app

    url, study_id = cancelled_study
    client = TestClient(make_app(Database(url)))
    last = client.get(f"/studies/{study_id}?format=json").json()["trials"][-1]["number"]
    page = client.get(f"/studies/{study_id}/trials/{last}").text
    assert '<span class="state cancelled">cancelled</span>' in page


def test_long_configs_fold_and_numbers_are_never_cut(tmp_path: Path) -> None:
    """The H200's Llama 3B study at 80 columns: its configs (`mb=4 bf16
    compile:reduce-overhead flash`) are too long for one line beside the numbers. The config
    folds onto a second line; before, every number was cut (`24,9…` tok/s, `comple…`)."""
    import shutil

    recorded = Path(__file__).resolve().parents[2] / "bench/results/h200_session_20261201"
    db = tmp_path / "llama-3b.db"
    shutil.copy(recorded / "tune-llama-3b.db", db)
    db.chmod(0o644)
    upgrade_database(f"sqlite:///{db}")  # recorded at an older schema: as `trials` says to
    proc = run_cli("trials", "st-9c62f86a", "--db", f"sqlite:///{db}", env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80, proc.stdout
    assert "…" not in proc.stdout, proc.stdout
    for number in ("24,916", "30,602", "complete", "66.2%", "106.07"):
        assert number in proc.stdout, proc.stdout
    assert "compile:reduce-overhead" in proc.stdout  # the config, whole, over two lines


def test_status_at_80_columns_keeps_the_id_whole_and_shows_the_best(tmp_path: Path) -> None:
    """The study id is what every other verb takes: at 80 columns it was cut (`st-d8904…`).
    The list also says what each study recommends so far (value and trial), not only its #,
    and how much of its budget it spent (trials, minutes: the 10-minute one ran 11.9)."""
    from bench.dashboard_screenshots import merge_databases

    recorded = Path(__file__).resolve().parents[2] / "bench/results/h200_session_20261201"
    db = tmp_path / "h200.db"
    merge_databases(sorted(recorded.glob("tune-*.db")), db)  # the three H200 studies
    upgrade_database(f"sqlite:///{db}")  # recorded at an older schema: as `status` says to
    proc = run_cli("status", "--db", f"sqlite:///{db}", env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80, proc.stdout
    assert "…" not in proc.stdout, proc.stdout
    for shown in (
        "st-d890417c", "381,892 #2", "2026-12-01 20:49", "33/80 · 4.3/6 min",
        "st-9c62f86a", "30,602 #4", "6 launched · 11.9/10 min",
        "530,225 #1", "11/45 · 6.5/7 min",
    ):  # fmt: skip
        assert shown in proc.stdout, (shown, proc.stdout)
