"""The same `tune` run again after a Ctrl-C resumes its interrupted study and finishes it; run
with a changed spec it is refused, naming the change and the two ways out (issue 42: "`tune`
on an interrupted study"). Real local Ray, real trial subprocesses on torch (CPU), SQLite; the
lookup itself on Postgres too: tests/coordinator/test_restore_match.py."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import yaml

from tests.coordinator.test_interrupt_resume import REPO, _interrupt, _rows, _start

pytestmark = [pytest.mark.ray, pytest.mark.trials, pytest.mark.slow]


def test_tune_again_resumes_its_interrupted_study_or_names_what_changed(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"
    # cpu-demo with longer repeats: a trial lasts seconds, so the signal meets one running.
    space = tmp_path / "space.yaml"
    settings = yaml.safe_load((REPO / "search_spaces" / "cpu-demo.yaml").read_text())
    settings["measure"]["min_repeat_s"] = 1.0
    space.write_text(yaml.safe_dump(settings))
    spec = tmp_path / "model.yaml"
    spec.write_text("preset: tiny\n")
    args = ("tune", str(spec), "--space", str(space), "--trials", "3", "--db", db)
    _, said = _interrupt(_start(*args), db, signal.SIGINT)
    ((study_id,),) = _rows(db, "SELECT id FROM studies")
    assert "(or the same tune command again)" in said

    spec.write_text("preset: tiny\nseq_len: 128\n")
    changed = _start(*args)
    _, err = changed.communicate(timeout=120)
    assert changed.returncode == 2, err[-3000:]
    # One line: the study, what changed, and both ways out.
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: study {study_id} ('tiny / cpu-demo') was interrupted"), line
    assert "model.seq_len was 64, now 128" in line, line
    assert f"autotuner resume {study_id}" in line and "--name" in line, line
    assert _rows(db, "SELECT id, status FROM studies") == [(study_id, "interrupted")]

    interrupted = _rows(db, "SELECT number FROM trials WHERE error_class = 'interrupted'")
    measured = _rows(db, "SELECT number FROM trials WHERE state = 'complete'")
    spec.write_text("preset: tiny\n")
    again = _start(*args)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-3000:]
    # Where it stands, in one line: measured, to run again, budget left.
    notice = " ".join(err.split())
    standing = f"resuming study {study_id} (tiny / cpu-demo): {len(measured)} trial"
    assert standing in notice, notice[-3000:]
    assert (f"{len(interrupted)} to run again" in notice) == bool(interrupted), notice[-3000:]
    assert "of 3 new trials left" in notice and "Traceback" not in err
    assert "Recommended config" in out
    assert _rows(db, "SELECT id, status FROM studies") == [(study_id, "completed")]
    trials = _rows(db, "SELECT state, retry_of FROM trials")
    # Its budget of 3 in all, the interrupted trial run again without spending it.
    assert len([t for t in trials if t.state != "pruned" and t.retry_of is None]) == 3, trials
    assert not [t for t in trials if t.state == "running"], trials
