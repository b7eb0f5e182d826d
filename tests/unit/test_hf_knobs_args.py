"""bench/hf_knobs.py's arms as asked for (the GPU runs them; here only what it would run):
`modes --modes` runs the chosen compile modes only, and an unknown one is refused naming the
known ones before anything runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.hf_knobs import MODES, modes

REPO = Path(__file__).resolve().parents[2]


class _Arms:
    """Records each arm a Recorder would run."""

    def __init__(self) -> None:
        self.arms: list[dict[str, Any]] = []

    def run(self, path: str, arm: dict[str, Any], study: str) -> None:
        self.arms.append(arm)


def test_modes_runs_the_chosen_modes_for_each_kernels_value() -> None:
    rec = _Arms()
    modes(["m.yaml"], rec, 4, ["liger", "fused-ce"], ["max-autotune-no-cudagraphs"])  # type: ignore[arg-type]
    assert [(a["compile_mode"], a["kernels"]) for a in rec.arms] == [
        ("max-autotune-no-cudagraphs", "liger"),
        ("max-autotune-no-cudagraphs", "fused-ce"),
    ]
    assert all(a["compile_scope"] == "block" and a["micro_batch_size"] == 4 for a in rec.arms)
    everything = _Arms()
    modes(["m.yaml"], everything, 4, ["none"], list(MODES))  # type: ignore[arg-type]
    assert [a["compile_mode"] for a in everything.arms] == list(MODES)


def test_an_unknown_mode_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "bench/hf_knobs.py", "modes", "examples/hf/llama-3.2-1b.yaml",
         "--out", str(tmp_path / "x.json"), "--modes", "reduce-overhead,fast"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "--modes: unknown fast (known: default, reduce-overhead" in proc.stderr
    assert not (tmp_path / "x.json").exists()
