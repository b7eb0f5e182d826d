"""bench/assemble_landscape.py: a landscape from trials already run, on small fake exports."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import assemble_landscape as asm  # bench/assemble_landscape.py

from autotuner.executors.replay import Landscape
from autotuner.spec import Knobs, ModelSpec
from tests.fakes import FAKE_H200

LLAMA = ModelSpec.resolve({"preset": "llama-1b"})
STUDY_KNOBS = {**Knobs().model_dump(mode="json"), "loader_workers": 4, "vocab_pad_multiple": 64}


def _row(n: int, purpose: str = "seed", tps: float | None = 50_000.0, **kw: Any) -> dict:
    params = {"micro_batch_size": 8, "attention": "flash", **kw.pop("params", {})}
    row = {
        "number": n,
        "state": "complete" if tps else "failed",
        "purpose": purpose,
        "attempt": 1,
        "params": params,
        "tokens_per_s": tps,
        "tokens_per_s_min": tps and tps * 0.99,
        "tokens_per_s_max": tps and tps * 1.01,
        "tokens_per_s_per_gpu": tps,
        "mfu": 0.5 if tps else None,
        "peak_mem_gib": 60.0 if tps else None,
        "compile_s": 30.0,
        "error_class": None if tps else "compile_error",
        "error_message": None if tps else "CUDA graphs cannot run this config",
        "fingerprint": FAKE_H200.key,
        "started_at": f"2026-12-01T04:{n:02d}:00+00:00",
        "finished_at": f"2026-12-01T04:{n:02d}:50+00:00",
        "wall_s": None,
        "global_batch_tokens": 16384,
    }
    row.update(kw)
    return row


def _export(tmp: Path, name: str, rows: list[dict]) -> Path:
    path = tmp / f"trials-{name}.json"
    path.write_text(json.dumps(rows))
    best = {
        "model": LLAMA.model_dump(mode="json"),
        "knobs": STUDY_KNOBS,
        "fingerprint": FAKE_H200.model_dump(mode="json"),
    }
    (tmp / f"best-{name}.json").write_text(json.dumps({"best": best}))
    return path


def test_assembles_merges_and_excludes_honestly(tmp_path: Path) -> None:
    rows = [
        _row(0, tps=50_000.0, wall_s=80.0),
        _row(1, "proxy", tps=150_000.0),  # a 2-layer model: never in a full-depth landscape
        _row(2, "remeasure", tps=52_000.0, wall_s=20.0),  # warm compile cache
        _row(3, "headroom", tps=51_000.0, wall_s=200.0),
        _row(4, "search", tps=None, params={"attention": "cudnn"}),  # a failure: kept
        _row(5, "search", tps=None, state="pruned", error_class="unsupported"),
        _row(6, "search", tps=40_000.0, params={"micro_batch_size": 4}, global_batch_tokens=None),
        _row(7, "search", tps=45_000.0, params={"micro_batch_size": 4, "grad_accum": 4}),
        # The numerics check's loss-parity trials count their compiling first step: not
        # measurements (a 3B parity-ref at 12,672 tok/s became a landscape entry on 2026-12-04).
        _row(8, "parity-ref", tps=12_000.0, params={"micro_batch_size": 2}),
        _row(9, "parity", tps=13_000.0, params={"micro_batch_size": 2, "precision": "fp16"}),
    ]
    src = _export(tmp_path, "a", rows)
    out = tmp_path / "landscape.json"
    assert asm.main(["--model", "llama-1b", "--out", str(out), str(src), str(src)]) == 0
    doc = json.loads(out.read_text())

    assert doc["duplicates_dropped"] == len(rows) - 1  # the second copy of the file (not pruned)
    assert any("proxy" in k for k in doc["excluded"])
    assert any("headroom" in k for k in doc["excluded"])
    assert sum(n for k, n in doc["excluded"].items() if "loss-parity" in k) == 2
    assert any("pruned" in k for k in doc["excluded"])
    by = {
        (e["params"]["micro_batch_size"], e["params"]["grad_accum"], e["params"]["attention"]): e
        for e in doc["entries"]
    }
    assert set(by) == {(8, 1, "flash"), (8, 1, "cudnn"), (4, 1, "flash"), (4, 4, "flash")}
    merged = by[(8, 1, "flash")]
    assert merged["result"]["tokens_per_s"] == 51_000.0  # median of 50k and 52k
    assert merged["result"]["tokens_per_s_min"] == 50_000.0 * 0.99
    assert merged["result"]["tokens_per_s_max"] == 52_000.0 * 1.01
    assert merged["result"]["wall_s"] == 80.0  # the first visit's, not the warm re-measurement
    assert len(merged["measurements"]) == 2
    failed = by[(8, 1, "cudnn")]["result"]
    assert failed["status"] == "failed" and failed["failure_class"] == "compile_error"
    assert failed["wall_s"] == 50.0  # finished_at - started_at when the row has no wall_s
    # The global batch is recorded on every entry, and counted.
    assert by[(4, 4, "flash")]["params"]["global_batch_tokens"] == 4 * 4 * 2048
    assert by[(4, 1, "flash")]["params"]["global_batch_tokens"] == 4 * 2048
    assert doc["global_batches"] == {"8192": 1, "16384": 2, "32768": 1}
    # Inactive knobs (the study's loader_workers 4) are at their defaults.
    assert {e["params"]["loader_workers"] for e in doc["entries"]} == {2}
    # The replay reads it.
    landscape = Landscape.load(out)
    assert len(landscape.entries) == 4
    assert landscape.target().device_name == FAKE_H200.device_name


def test_a_held_global_batch_derives_grad_accum_and_successes_define_a_config(
    tmp_path: Path,
) -> None:
    held = 65536
    rows = [
        _row(0, tps=None, params={"micro_batch_size": 8}, global_batch_tokens=held),
        _row(1, tps=None, params={"micro_batch_size": 16}, global_batch_tokens=held),
    ]
    later = [_row(9, tps=30_000.0, params={"micro_batch_size": 8}, global_batch_tokens=held)]
    a, b = _export(tmp_path, "old", rows), _export(tmp_path, "new", later)
    doc = asm.assemble([a, b], "llama-1b")
    by = {e["params"]["micro_batch_size"]: e for e in doc["entries"]}
    assert by[8]["params"]["grad_accum"] == 4 and by[16]["params"]["grad_accum"] == 2
    # One failed, one ran the same config: the success defines it, the failure is listed.
    assert by[8]["result"]["status"] == "ok"
    assert [m["status"] for m in by[8]["measurements"]] == ["failed", "ok"]
    assert by[16]["result"]["status"] == "failed"


def test_another_model_is_refused(tmp_path: Path) -> None:
    src = _export(tmp_path, "a", [_row(0)])
    with pytest.raises(SystemExit, match="no comparable trial of llama-3b"):
        asm.assemble([src], "llama-3b")


def test_a_databases_pruned_rows_are_not_measurements_even_with_a_result(tmp_path: Path) -> None:
    """The cost model's "predicted out of memory" prunes a trial and stores why as its result: a
    recording's database holds such rows, and a landscape that read them as OOMs would answer a
    replayed proposal with a failure nobody measured."""
    from autotuner.spec import TrialResult

    config = json.dumps({"knobs": STUDY_KNOBS, "model": LLAMA.model_dump(mode="json")})
    predicted = TrialResult.failure("oom", "predicted out of memory: needs 210.2 GiB")
    measured = TrialResult.failure("oom", "out of memory: CUDA out of memory")
    db = _recording(tmp_path, {}, [("pruned", config, predicted), ("infeasible", config, measured)])
    rows = asm.read_db(db)
    assert [m.purpose for m in rows] == ["skipped", "search"]
    assert rows[0].data_source == "not run"
    assert rows[1].result.failure_class == "oom"


def _recording(tmp: Path, space: dict, trials: list[tuple[str, str, Any]]) -> Path:
    """A recording's database with the columns the assembler reads: one study of `space`,
    and (state, config, result) trials."""
    import sqlite3

    db = tmp / "rec.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE studies (id TEXT, space TEXT)")
    con.execute("INSERT INTO studies VALUES ('st-1', ?)", (json.dumps(space),))
    con.execute(
        "CREATE TABLE trials (study_id TEXT, number INT, state TEXT, purpose TEXT, attempt INT,"
        " params TEXT, config TEXT, result TEXT, started_at TEXT)"
    )
    for n, (state, config, result) in enumerate(trials):
        params = json.dumps({"micro_batch_size": n + 1})
        con.execute(
            "INSERT INTO trials VALUES ('st-1', ?, ?, 'search', 1, ?, ?, ?, ?)",
            (n, state, params, config, result.model_dump_json(), f"2026-12-03T18:0{n}:00"),
        )
    con.commit()
    con.close()
    return db


def test_a_compile_budget_the_sessions_time_cut_short_is_no_entry(tmp_path: Path) -> None:
    """A recording session's last minutes lower a trial's compile budget to the time left: a
    trial stopped at 180 s where the space allows 300 measured the session, not the config, so
    it is no landscape entry and a later session runs the config again. One stopped at the
    space's own budget is an entry (what a search pays for that config)."""
    from autotuner.spec import TrialResult
    from bench.record_landscape import configs_run

    def budget_run(seconds: float) -> tuple[str, str, Any]:
        cfg = {"knobs": STUDY_KNOBS, "model": LLAMA.model_dump(mode="json")}
        cfg["measure"] = {"compile_budget_s": seconds}
        message = f"compile budget: the first step ... was still compiling after {seconds:.0f} s"
        return "infeasible", json.dumps(cfg), TrialResult.failure("compile_error", message)

    space = {"measure": {"compile_budget_s": 300}}
    db = _recording(tmp_path, space, [budget_run(179.9), budget_run(300.0)])
    cut, kept = asm.read_db(db)
    assert cut.purpose == "skipped"
    why = "compile budget cut to the study's time left (180 s; the space's 300 s)"
    assert cut.data_source == why
    assert kept.purpose == "search" and kept.result.failure_class == "compile_error"
    assert configs_run(db) == [{"micro_batch_size": 2}]


def test_a_hugging_face_spec_file_names_its_landscape_and_keeps_only_its_trials(
    tmp_path: Path,
) -> None:
    """An `hf` model has no preset: its trials are matched on the family and sizes, and the
    landscape is named after the spec file; a Llama preset's trials are another model."""
    spec = Path(__file__).resolve().parents[2] / "examples/hf/llama-3.2-1b.yaml"
    hf_model, label = asm.resolve_model(str(spec))
    assert (hf_model.family, label) == ("hf", "llama-3.2-1b")
    gb = {"global_batch_tokens": 65536}  # 4096-token sequences
    hf_src = _export(tmp_path, "hf", [_row(0, **gb), _row(1, params={"micro_batch_size": 4}, **gb)])
    best = json.loads((tmp_path / "best-hf.json").read_text())
    best["best"]["model"] = hf_model.model_dump(mode="json")
    (tmp_path / "best-hf.json").write_text(json.dumps(best))
    preset_src = _export(tmp_path, "preset", [_row(0, params={"micro_batch_size": 2})])
    doc = asm.assemble([hf_src, preset_src], str(spec))
    assert doc["model"] == "llama-3.2-1b"
    assert sorted(e["params"]["micro_batch_size"] for e in doc["entries"]) == [4, 8]
    assert {e["params"]["model"] for e in doc["entries"]} == {"llama-3.2-1b"}
