"""The recommendation's GPU clock line, on the H200's recorded 10-minute Llama 3B study: its
winner was timed at the board's power cap, and `best` says so."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

from rich.console import Console

from autotuner.cli.render import best_table
from autotuner.search.objective import Objective
from autotuner.spec import Telemetry
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.gpu_clock import gpu_clock_entry
from autotuner.study.recommend import recommend

STUDY_DB = (
    Path(__file__).resolve().parents[2] / "bench/results/h200_session_20261204g/tune-llama-3b.db"
)


def test_a_winner_timed_at_the_power_cap_says_so_in_best(tmp_path: Path) -> None:
    db_path = tmp_path / "study.db"
    shutil.copy(STUDY_DB, db_path)  # never the committed file
    db = Database(f"sqlite:///{db_path}")
    with db.read() as s:
        rec = recommend(TrialRepo(s).list("st-02f3163f"), Objective.TOKENS_PER_S)
    assert rec is not None and rec["gpu_clock"]["capped_by"] == ["SwPowerCap"]
    view = {"best": rec, "study": "st-02f3163f", "status": "completed", "total_trials": 4}
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(best_table(view))
    out = console.export_text()
    text = " ".join(out.replace("│", " ").split())  # the cells, wrapped lines joined
    assert "GPU clock" in text
    assert "1,553 MHz mean of 1,980 max, held at the power cap (691 W, SwPowerCap)" in text
    assert max(len(line) for line in out.splitlines()) <= 80


def test_no_line_without_samples_and_no_cap_without_a_reason() -> None:
    assert gpu_clock_entry(None) is None
    assert gpu_clock_entry(Telemetry()) is None  # no NVML on this worker
    free = gpu_clock_entry(Telemetry(sm_clock_mean_mhz=1980.0, sm_clock_max_mhz=1980.0))
    assert free is not None and free["capped_by"] == []
    assert free["text"] == "1,980 MHz mean of 1,980 max"
    hot = gpu_clock_entry(
        Telemetry(sm_clock_mean_mhz=1200.0, throttle_reasons=["HwThermalSlowdown"])
    )
    assert hot is not None and hot["text"].endswith("thermally throttled (HwThermalSlowdown)")
