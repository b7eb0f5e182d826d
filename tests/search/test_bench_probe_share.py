"""bench/probe_share.py on committed H200 studies: the probe's seconds come from each trial's
build parts, first uses apart, and a study with the skip counts the trials that skipped it."""

from __future__ import annotations

from pathlib import Path

from bench.probe_share import main, study_probes

RESULTS = Path(__file__).resolve().parents[2] / "bench/results"
EVERY = RESULTS / "h200_session_20261204d/tune-gpt2-eager-wide-after.db"
ONCE = RESULTS / "h200_session_20261206/tune-gpt2-eager-wide-probe-once.db"


def test_a_study_that_probed_every_trial_skipped_none() -> None:
    row = study_probes(EVERY)
    assert row["skipped"] == {} and row["probes"] == row["trials"] == 33
    # cuDNN's first use at a dtype costs about a second; later probes a fraction of one.
    assert max(row["first_s"]["cudnn"]) > 1.0 > 5 * row["later_median_s"]["cudnn"]


def test_the_probe_skip_is_counted_and_priced_by_the_baseline(capsys) -> None:
    row = study_probes(ONCE)
    assert row["probes"] + sum(row["skipped"].values()) == row["trials"] == 31
    assert row["skipped"]["cudnn"] == 14 and row["later_median_s"] == {}
    assert main([str(EVERY), str(ONCE)]) == 0
    out = capsys.readouterr().out
    # 14 cuDNN trials x 0.174 s, 6 flash x 0.051, 2 efficient x 0.052: 2.85 s of 176.
    assert "| 31 | 176 | 9 | 4.69 | 2.7% | 22 | 2.85 s (1.6%) |" in out, out
