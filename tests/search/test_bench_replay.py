"""The replay benchmark end to end, through the CLI, on a small fake landscape."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from autotuner.cli import app
from tests.search.conftest import GPT2, gpt2_landscape


def test_bench_replay_reports_every_strategy(tmp_path: Path) -> None:
    knobs = {
        "micro_batch_size": [16, 64, 256],
        "precision": ["bf16", "fp32"],
        "attention": ["flash", "math"],
        "compile_mode": ["none", "default"],
    }
    landscape = gpt2_landscape(knobs)
    landscape.meta = {"model": GPT2.preset}
    path = tmp_path / "landscape_fake.json"
    landscape.dump(path)
    result = CliRunner().invoke(
        app,
        ["bench", "replay", "--landscape", str(path), "--seeds", "2", "--out", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "replay_fake.json").read_text())
    assert (tmp_path / "replay_fake.md").read_text().startswith("# Replay benchmark")
    assert set(doc["strategies"]) == {"ours", "ours-noseed", "tpe", "random", "grid"}
    assert doc["universe_size"] == 24 and doc["grid_size"] == 24
    ours = doc["strategies"]["ours"]
    assert ours["runs"] == 2 and ours["impossible_launched_total"] == 0
    assert ours["hit_rate"] == 1.0
    for name, s in doc["strategies"].items():
        assert s["trials_to_2pct"]["median"] is None or s["trials_to_2pct"]["median"] >= 1, name
    assert doc["strategies"]["tpe"]["impossible_launched_total"] > 0  # fp32 + flash proposed
    assert {"uncalibrated", "leave_one_out"} <= set(doc["cost_model_offline"])
    assert "trials median" in result.output


def test_bench_replay_rejects_an_unknown_strategy(tmp_path: Path) -> None:
    path = tmp_path / "l.json"
    path.write_text("[]")
    result = CliRunner().invoke(
        app, ["bench", "replay", "--landscape", str(path), "--strategies", "ours,annealing"]
    )
    assert result.exit_code == 2


def test_a_sparse_recording_is_the_universe_every_strategy_searches(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import replay as bench  # bench/replay.py

    from autotuner.executors.replay import Landscape

    knobs = {
        "micro_batch_size": [8, 16, 32, 64, 128, 256],
        "precision": ["bf16", "fp32"],
        "attention": ["flash", "efficient", "math"],
        "compile_mode": ["none", "default"],
    }
    dense = gpt2_landscape(knobs)
    # Sweeps around a base config, as bench/gpu_validation.py records them: one knob at a time.
    base = {
        "micro_batch_size": 16,
        "precision": "bf16",
        "attention": "flash",
        "compile_mode": "none",
    }
    kept = [
        (p, r)
        for p, r in dense.entries
        if sum(p[k] != base[k] for k in base) <= 1 or p["micro_batch_size"] in (16, 64)
    ]
    sparse = Landscape(kept, {"model": GPT2.preset})
    path = tmp_path / "landscape_sparse.json"
    sparse.dump(path)
    doc = bench.run_benchmark(str(path), seeds=2, strategies=["ours", "random", "tpe"])
    assert doc["universe_size"] == len(kept) < doc["grid_size"]
    for run in doc["runs"]:
        assert run["pruned_not_recorded"] == 0, run  # every proposal snapped to a recording
        assert run["trials_to_2pct"] is not None
