"""A `tune` stopped by its user (Ctrl-C, SIGTERM) mid-trial stores the study `interrupted` with
nothing left running, and `autotuner resume` finishes it where it stopped (issue 42: the study
and a trial stayed `running` for good). Real local Ray, real trial subprocesses on torch (CPU).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import text

from tests.direct_db import direct_connection
from tests.polling import wait_for

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.ray, pytest.mark.trials, pytest.mark.slow]


def _start(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "AUTOTUNER_SERVER")}
    return subprocess.Popen(
        [sys.executable, "-m", "autotuner.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )


def _rows(db: str, query: str) -> list[Any]:
    with direct_connection(db) as connection:
        return list(connection.execute(text(query)))


def _running_trial(db: str) -> list[Any]:
    from sqlalchemy.exc import OperationalError

    try:
        return _rows(db, "SELECT number FROM trials WHERE state = 'running'")
    except OperationalError:  # `tune` has not made the tables yet
        return []


def _interrupt(proc: subprocess.Popen[str], db: str, sig: signal.Signals) -> tuple[str, str]:
    wait_for(lambda: _running_trial(db), timeout_s=180, what="a running trial")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 128 + sig, err[-3000:]
    return out, err


def test_sigint_and_sigterm_interrupt_tune_and_resume_finishes_it(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"
    # cpu-demo with longer repeats: a trial lasts seconds, so a signal seldom falls between two.
    space = tmp_path / "space.yaml"
    spec = yaml.safe_load((REPO / "search_spaces" / "cpu-demo.yaml").read_text())
    spec["measure"]["min_repeat_s"] = 1.0
    space.write_text(yaml.safe_dump(spec))
    tune = _start("tune", "examples/tiny.yaml", "--space", str(space), "--trials", "3", "--db", db)
    _, err = _interrupt(tune, db, signal.SIGINT)
    ((study_id, status, message),) = _rows(db, "SELECT id, status, error_message FROM studies")
    assert status == "interrupted" and message == "interrupted by SIGINT"
    assert f"continue it with: autotuner resume {study_id}" in err
    assert "Traceback" not in err
    # Nothing left running; the cancelled trial says so, and runs again at resume.
    # Nothing left running (a trial between two others may have ended before the signal).
    states = _rows(db, "SELECT state, error_class FROM trials")
    assert not [row for row in states if row.state == "running"], states
    _, said = _start("status", study_id, "--db", db).communicate(timeout=60)
    assert f"interrupted by SIGINT; continue it with: autotuner resume {study_id}" in said

    resumed = _start("resume", study_id, "--db", db)
    _interrupt(resumed, db, signal.SIGTERM)
    ((status, message),) = _rows(db, "SELECT status, error_message FROM studies")
    assert (status, message) == ("interrupted", "interrupted by SIGTERM")
    assert not _rows(db, "SELECT number FROM trials WHERE state = 'running'")

    finished = _start("resume", study_id, "--db", db)
    out, err = finished.communicate(timeout=300)
    assert finished.returncode == 0, err[-3000:]
    assert "Recommended config" in out
    ((status,),) = _rows(db, "SELECT status FROM studies")
    assert status == "completed"
    trials = _rows(db, "SELECT number, state, error_class, retry_of, attempt FROM trials")
    # Its budget of 3, not 3 more: the interrupted trials ran again as re-runs of themselves,
    # at the same attempt (their config's retry unspent), counted once.
    launched = [t for t in trials if t.state != "pruned" and t.retry_of is None]
    assert len(launched) == 3, trials
    interrupted = {t.number: t for t in trials if t.error_class == "interrupted"}
    # Each signal met a trial unless it fell in the instant between two (a trial lasts seconds).
    assert interrupted, trials
    assert all(t.state == "lost" for t in interrupted.values()), trials
    reruns = {t.retry_of: t for t in trials if t.retry_of in interrupted}
    assert set(reruns) == set(interrupted), trials
    assert all(reruns[n].attempt == interrupted[n].attempt for n in reruns), trials
    assert not [t for t in trials if t.state == "running"]
