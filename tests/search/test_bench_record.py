"""bench/record_landscape.py on the CPU: two recording sessions into one database, each a real
`tune` (on a local Ray cluster, tiny model) that runs nothing but grid points, in orders of their
own, each measured in full; the recording assembles into a landscape the replay reads."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from autotuner.executors.replay import Landscape
from autotuner.spec import TrialResult
from bench.assemble_landscape import assemble
from bench.record_landscape import main as record

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_two_sessions_record_different_grid_points_in_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray
    from ray.cluster_utils import Cluster

    db = tmp_path / "tiny.db"
    monkeypatch.setenv("COLUMNS", "100")
    # One Ray cluster on this machine for both sessions, each `tune` its driver ($RAY_ADDRESS):
    # not a cluster of each one's own, started and stopped twice (seconds each on 2 cores).
    ray.shutdown()  # this process is no driver: only the sessions are
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 0})
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    try:
        for _ in range(2):
            argv = ["examples/tiny.yaml", "--space", "cpu-demo", "--trials", "3", "--db", str(db)]
            assert record(argv) == 0
    finally:
        cluster.shutdown()
    with sqlite3.connect(db) as conn:
        studies = conn.execute("SELECT id, name, seed FROM studies ORDER BY created_at").fetchall()
        options = [json.loads(o) for (o,) in conn.execute("SELECT options FROM studies")]
        rows = conn.execute(
            "SELECT study_id, state, purpose, params, result FROM trials"
        ).fetchall()
    assert [(name, seed) for _, name, seed in studies] == [
        ("landscape-tiny-0", 0),
        ("landscape-tiny-1", 1),
    ]
    # The tune's headroom kept to screen with (the default: not stored), never checked.
    for stored in options:
        assert stored["headroom_check"] is False and "headroom" not in stored, stored
    ran = {sid: [] for sid, _, _ in studies}
    for sid, state, purpose, params, result in rows:
        if state == "pruned":
            continue
        # Grid points only: no seed, re-measurement or end check; every one measured in full.
        assert purpose == "search", purpose
        assert not TrialResult.model_validate_json(result).stopped_early
        ran[sid].append(json.dumps(json.loads(params), sort_keys=True))
    first, second = ran.values()
    assert len(first) == len(second) == 3
    assert not set(first) & set(second)  # the second session's grid order is its own

    landscape = assemble([db], "tiny")
    assert len(landscape["entries"]) == 6
    (tmp_path / "landscape.json").write_text(json.dumps(landscape))
    assert len(Landscape.load(tmp_path / "landscape.json").entries) == 6  # as the replay reads it
