"""bench/optimizer_step.py on the CPU: every optimizer the worker builds is stepped on the
same model's gradients and compared with fused AdamW's step, measured in the same run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.optimizer_step import main


@pytest.mark.slow  # torchao's 8-bit step compiles on the CPU: about a minute
def test_each_optimizer_is_timed_against_fused_adamw(tmp_path: Path, capsys) -> None:
    pytest.importorskip("torchao.optim")
    out = tmp_path / "step.json"
    main(["--preset", "llama-tiny", "--rounds", "2", "--steps", "1", "--out", str(out)])
    doc = json.loads(out.read_text())
    rows = doc["optimizers"]
    assert list(rows) == ["adamw-fused", "adamw-foreach", "adamw-8bit"]
    assert rows["adamw-fused"]["vs_fused"] == 1.0
    for row in rows.values():
        assert len(row["samples_ms"]) == 2 and row["step_ms"] > 0
        assert row["prior_ms"] is None  # the CPU's nominal rates are placeholders
    assert doc["tensors"] > 0 and doc["adamw_8bit_call_us"] > 0
    printed = capsys.readouterr().out
    assert "adamw-8bit" in printed and "host cost a tensor" in printed
