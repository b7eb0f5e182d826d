"""bench/power_cap_probe.py on the CPU: each arm is a real trial process with its measurement
change, and the summary compares every arm with the search trial's (`synthetic`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.power_cap_probe import SEARCH, main

CPU_KNOBS = {
    "precision": "fp32",
    "attention": "math",
    "compile_mode": "none",
    "micro_batch_size": 2,
}


@pytest.mark.slow  # real trials in fresh processes, one per arm
def test_the_arms_run_as_trials_and_are_compared_with_the_search_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the arms measure does not matter here, only that each runs as a trial with its
    # change: a search trial's three repeats, 0.25 s each (cpu-demo's, not 1 s), on one thread
    # (two threads' steps ran up to 30x slower while other processes shared the 2 cores).
    monkeypatch.setitem(SEARCH, "min_repeat_s", 0.25)
    monkeypatch.setitem(SEARCH, "cpu_threads", 1)
    out = tmp_path / "probe.json"
    argv = ["--preset", "tiny", "--device", "cpu", "--rounds", "1", "--out", str(out)]
    argv += ["--arms", "synthetic,after-parity", "--knobs", json.dumps(CPU_KNOBS)]
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    rows = {r["arm"]: r for r in doc["rows"]}
    assert set(rows) == {"synthetic", "after-parity"}
    assert all(r["status"] == "ok" and r["tokens_per_s"] for r in rows.values()), rows
    assert len(rows["synthetic"]["repeats"]) == 3  # a search trial's repeats
    assert all(r["peak_mem_gib"] and r["peak_mem_gib"] > 0 for r in rows.values()), rows
    s = doc["summary"]
    assert s["synthetic"]["vs_synthetic"] == 1.0
    assert s["after-parity"]["vs_synthetic"] > 0
    assert doc["knobs"]["precision"] == "fp32"
