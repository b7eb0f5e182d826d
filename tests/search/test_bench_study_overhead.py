"""bench/study_overhead.py on committed H200 studies: every second of a study's wall is
attributed once, and a compiled trial's first step counts as compile, an eager one's as
overhead."""

from __future__ import annotations

from pathlib import Path

from bench.study_overhead import study_shares

RESULTS = Path(__file__).resolve().parents[2] / "bench/results"
KINDS = ("measure_s", "warmup_s", "compile_s", "end_checks_s", "trial_overhead_s", "coordinator_s")


def test_the_llama_8b_study_is_mostly_compile_and_adds_up_to_its_wall() -> None:
    (row,) = study_shares(RESULTS / "h200_session_20261203b/tune-llama-8b.db")
    assert row["trials_run"] == row["trials_with_phases"] == 2
    assert abs(sum(row[k] for k in KINDS) - row["wall_s"]) < 1.0, row
    # 88 s (bf16) and 219 s (fp8) compiles: the first steps of two compiled trials.
    assert 300 < row["compile_s"] < 0.95 * row["wall_s"]


def test_an_eager_grid_has_no_compile_and_counts_its_out_of_memory_trials() -> None:
    (row,) = study_shares(RESULTS / "h200_session_20261203/tune-gpt2-failures.db")
    assert row["compile_s"] == 0.0 and row["trials_run"] == 33  # 20 measured, 13 OOM
    assert abs(sum(row[k] for k in KINDS) - row["wall_s"]) < 1.0, row
    assert row["trial_overhead_s"] > row["measure_s"]  # the 3 s measurements of eager GPT-2
