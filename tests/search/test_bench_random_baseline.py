"""bench/random_baseline.py: random search's GPU-seconds by drawing orders, checked against the
closed-form mean, and on a committed landscape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.random_baseline import expected_gpu_s, gpu_s_until_within, main

REPO = Path(__file__).resolve().parents[2]


def test_the_drawn_mean_is_the_closed_form_one() -> None:
    # Two configs within 2% of the best (100 and 99), three outside, walls 10-50 s.
    configs = [(100.0, 10.0), (99.0, 20.0), (50.0, 30.0), (40.0, 40.0), (0.0, 50.0)]
    # Inside: mean wall 15; each of the 3 outside is drawn before both inside with p = 1/3.
    assert expected_gpu_s(configs) == pytest.approx(15.0 + (30 + 40 + 50) / 3)
    drawn = gpu_s_until_within(configs, draws=20000)
    assert sum(drawn) / len(drawn) == pytest.approx(expected_gpu_s(configs), rel=0.02)
    assert min(drawn) == 10.0 and max(drawn) == 30 + 40 + 50 + 20


def test_a_landscape_row_reports_the_median_and_a_20_run_medians_spread(capsys) -> None:
    landscape = str(REPO / "bench/results/landscape_llama_3b_h200.json")
    assert main([landscape, "--global-batch", "32768", "--draws", "4000"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["configs"] == 60 and report["within_2pct"] >= 1
    assert report["median_of_20_p10"] < report["median_gpu_s"] < report["median_of_20_p90"]
    assert report["mean_gpu_s"] == pytest.approx(report["expected_gpu_s"], rel=0.05)
