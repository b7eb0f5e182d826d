"""bench/trial_startup_profile.py on the CPU: every stage is timed in a fresh interpreter."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import trial_startup_profile as prof  # bench/trial_startup_profile.py


def test_profiles_every_stage_of_a_fresh_trial_process(tmp_path: Path) -> None:
    out = tmp_path / "prof.json"
    assert prof.main(["--runs", "1", "--micro-batch", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    (run,) = report["runs"]
    assert list(run) == prof.STAGES
    assert all(seconds >= 0 for seconds in run.values())
    # A step ran: the model's forward and backward take time even for the tiny CPU model.
    assert run["first_step"] > 0 and run["second_step"] > 0
    assert report["median_s"] == run
