"""bench/throughput_loo.py: leave-one-out on a recorded landscape beats the prior alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import throughput_loo  # bench/throughput_loo.py

REPO = Path(__file__).resolve().parents[2]


def test_the_fitted_model_beats_the_prior_on_a_recorded_landscape(tmp_path: Path) -> None:
    out = tmp_path / "loo.json"
    landscape = str(REPO / "bench/results/landscape_llama_1b_h200.json")
    assert throughput_loo.main([landscape, "--global-batch", "32768", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["configs"] >= 40  # the 32,768-token configs only
    assert report["fitted"]["median_abs"] < report["prior"]["median_abs"]
    by_precision = report["median_signed_by_precision"]
    assert {"bf16", "fp8-rowwise", "fp8-tensorwise"} <= set(by_precision)
    assert {"cudnn", "efficient", "flash", "flex"} <= set(report["median_signed_by_attention"])
    assert {"default", "none", "reduce-overhead"} <= set(report["median_signed_by_compile_mode"])


def test_a_global_batch_nobody_ran_is_a_clear_error() -> None:
    landscape = str(REPO / "bench/results/landscape_llama_1b_h200.json")
    try:
        throughput_loo.main([landscape, "--global-batch", "12345"])
    except SystemExit as exc:
        assert "12,345" in str(exc)
    else:
        raise AssertionError("no error for a global batch with no configs")
