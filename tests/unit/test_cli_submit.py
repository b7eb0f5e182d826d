"""`submit` reads a model spec as `tune` does: a relative factory file is found from the spec
file's folder, not from where the command runs, and sent made absolute (issue 42)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.unit.test_cli_errors import REPO, run_cli


def _stored_factory(sqlite_url: str) -> str:
    import json

    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        ((spec,),) = conn.execute("SELECT model_spec FROM studies").fetchall()
    return str(json.loads(spec)["factory"])


def test_submit_finds_a_relative_factory_file_beside_its_spec(sqlite_url: str) -> None:
    # Run from the repository root: `my_model.py` is in examples/, beside the spec, not here.
    queued = run_cli("submit", "examples/my-model.yaml", "--space", "cpu-demo", "--db", sqlite_url)
    assert queued.returncode == 0, queued.stderr
    assert _stored_factory(sqlite_url) == f"{REPO / 'examples' / 'my_model.py'}:build"


def test_submit_names_a_relative_factory_file_that_is_not_there(
    sqlite_url: str, tmp_path: Path
) -> None:
    spec = tmp_path / "m.yaml"
    spec.write_text(
        "family: factory\nfactory: gone.py:build\nn_layer: 2\nd_model: 64\nn_head: 4\n"
        "vocab_size: 512\nseq_len: 64\n"
    )
    refused = run_cli("submit", str(spec), "--space", "cpu-demo", "--db", sqlite_url)
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith(f"error: {spec}: factory file gone.py not found (looked at "), line
    assert str(tmp_path / "gone.py") in " ".join(refused.stderr.split()), line
