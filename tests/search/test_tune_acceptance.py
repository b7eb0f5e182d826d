"""bench/tune_acceptance.py on the committed H200 studies: the latest 10-minute Llama 3B study's
recommendation is within 3% of the best known config at its global batch, an earlier study's
that the landscape has since beaten is not, and a recommendation stored before it named its
global batch is still judged."""

from __future__ import annotations

import json
from pathlib import Path

from bench.tune_acceptance import main

RESULTS = Path(__file__).resolve().parents[2] / "bench/results"
LANDSCAPE_3B = RESULTS / "landscape_llama_3b_h200.json"
BEST_3B = RESULTS / "h200_session_20261204b/best-llama-3b.json"
EARLIER_3B = RESULTS / "h200_session_20261201/best-llama-3b.json"


def test_the_llama_3b_study_passes_and_a_slower_one_fails(tmp_path: Path, capsys) -> None:
    assert main(["--best", str(BEST_3B), "--landscape", str(LANDSCAPE_3B)]) == 0
    out = capsys.readouterr().out
    # The study's own recommendation is the best known (fp8-tensorwise, micro-batch 8 x 2:
    # 32,672 tok/s, faster than anything in the landscape before it).
    assert "PASS: 100.0% of the best known" in out and "32,768 tokens" in out
    assert "(this study;" in out and "1.26x the expert default" in out

    slower = json.loads(BEST_3B.read_text())
    slower["best"]["tokens_per_s"] *= 0.9
    (tmp_path / "best.json").write_text(json.dumps(slower))
    assert main(["--best", str(tmp_path / "best.json"), "--landscape", str(LANDSCAPE_3B)]) == 1
    assert "FAIL: 90.0% of the best known" in capsys.readouterr().out


def test_a_recommendation_the_landscape_has_since_beaten_fails(capsys) -> None:
    # 2026-12-01's study (fp8 at micro-batch 4 x 4: 30,602) passed against the landscape of its
    # day; the 2026-12-04 study's 32,672 puts it at 93.7%.
    assert main(["--best", str(EARLIER_3B), "--landscape", str(LANDSCAPE_3B)]) == 1
    assert "FAIL: 93.7% of the best known" in capsys.readouterr().out


def test_an_older_recommendation_is_judged_at_its_knobs_global_batch(capsys) -> None:
    best = RESULTS / "tune_llama_h200/best-llama-1b.json"
    landscape = RESULTS / "landscape_llama_1b_h200.json"
    assert "global_batch" not in json.loads(best.read_text())["best"]
    assert main(["--best", str(best), "--landscape", str(landscape)]) == 0
    assert "global batch 32,768 tokens" in capsys.readouterr().out
