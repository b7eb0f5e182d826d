"""bench/concurrency_compare.py: a 1-GPU and a 2-GPU study's trial lists (as `autotuner trials
--all --json` prints them): the time each first measured a config near the best, and how the
configs measured beside another trial compare with the same configs measured alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.concurrency_compare import compare, main


def _trial(mb: int, tps: float, start: float, end: float, **kw: Any) -> dict[str, Any]:
    def at(s: float) -> str:
        return f"2026-12-06T10:{int(s // 60):02d}:{s % 60:06.3f}+00:00"

    return {
        "state": "complete",
        "purpose": "search",
        "params": {"micro_batch_size": mb},
        "tokens_per_s": tps,
        "tokens_per_s_min": tps * 0.99,
        "started_at": at(start),
        "finished_at": at(end),
        **kw,
    }


# One GPU: three trials one after another; the best (mb 32) is done at 30 s.
ONE = [_trial(8, 100.0, 0, 10), _trial(16, 150.0, 10, 20), _trial(32, 200.0, 20, 30)]
# Two GPUs: two at a time; mb 32 is done at 10 s but ran 5% slower beside mb 8; mb 16 ran
# alone (no overlap), at the 1-GPU study's speed.
TWO = [
    _trial(32, 190.0, 0, 10),
    _trial(8, 100.0, 0, 10),
    _trial(16, 150.0, 11, 21),
    {**_trial(64, 0.0, 0, 1), "state": "failed", "tokens_per_s": None},
]


def test_time_to_the_best_and_interference_of_overlapping_trials() -> None:
    result = compare(ONE, TWO)
    assert result["best_tokens_per_s"] == 200.0
    assert result["one_gpu"] == {"wall_s": 30.0, "measured": 3, "near_best_s": 30.0}
    # 190 is 5% under 200: outside 2%, so the 2-GPU study never measured near the best.
    assert result["two_gpus"]["near_best_s"] is None and result["two_gpus"]["measured"] == 3
    seen = result["interference"]
    assert seen["pairs"] == 2  # mb 32 and mb 8 overlapped each other; mb 16 ran alone
    assert seen["below_spread"] == 1  # mb 32's 190 is under the 1-GPU trial's 198 minimum
    assert seen["median_ratio"] == round((0.95 + 1.0) / 2, 4)


def test_the_command_reads_two_trial_lists(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "one.json").write_text(json.dumps(ONE))
    (tmp_path / "two.json").write_text(json.dumps(TWO))
    out = tmp_path / "cmp.json"
    assert main([str(tmp_path / "one.json"), str(tmp_path / "two.json"), "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == json.loads(capsys.readouterr().out)
