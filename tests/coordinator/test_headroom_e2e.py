"""The headroom check end to end on the CPU: real local Ray, real worker processes, real torch.

The study's last trial re-runs the winner with an evaluation pass and a checkpoint save; on the
CPU its peak (resident memory) is reported beside the headroom, not enforced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from tests.coordinator.test_tune_e2e import cli

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_a_cpu_study_ends_with_the_headroom_check_of_its_winner(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'h.db'}"
    proc = cli("tune", "examples/tiny.yaml", "--space", "cpu-demo", "--trials", "6", "--db", db)
    assert proc.returncode == 0, proc.stderr[-3000:]
    study_id = proc.stderr.split("study ", 1)[1].split(":", 1)[0].strip()
    trials = json.loads(cli("trials", study_id, "--db", db, "--json").stdout)
    checks = [t for t in trials if t["purpose"] == "headroom"]
    assert len(checks) == 1 and checks[0]["number"] == trials[-1]["number"], trials
    check = checks[0]
    with Database(db).read() as s:
        row = TrialRepo(s).get(study_id, check["number"])
        assert row is not None and row.result is not None
        config, result = row.config, row.result
    assert config["measure"]["headroom_check"] is True
    assert result["memory_kind"] == "cpu_rss"
    assert result["peak_mem_with_eval_ckpt_gib"] >= result["peak_mem_gib"] > 0
    # Every trial says which global batch it ran.
    assert all(t["global_batch_tokens"] for t in trials if t["state"] != "pruned")

    rec = json.loads(cli("best", study_id, "--db", db, "--json").stdout)["best"]
    assert rec["trial_number"] != check["number"]  # a check, never a candidate
    assert rec["params"] == check["params"]  # it checked the winner
    hr = rec["headroom"]
    assert hr["check"]["state"] == "reported" and hr["check"]["trial_number"] == check["number"]
    assert not hr["enforced"] and hr["peak_kind"] == "cpu_rss"
    assert "applies to GPU memory only" in hr["text"]
    shown = cli("best", study_id, "--db", db).stdout
    assert "headroom check" in shown and "CPU resident memory" in shown, shown
