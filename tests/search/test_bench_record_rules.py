"""bench/record_landscape.py's later sessions: what an earlier session ran is pruned by a rule
of the session's space (no GPU time), everything else is still a grid point to run."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from autotuner.search.space import load_space
from autotuner.spec import ModelSpec
from bench.record_landscape import SPACE, configs_run, session_space
from tests.search.conftest import make_policy

RAN = {
    "micro_batch_size": 2,
    "precision": "fp8-tensorwise",
    "compile_mode": "none",
    "attention": "flex",
    "checkpointing": "none",
    "optimizer": "adamw-foreach",
}


def _recording(path: Path) -> Path:
    """A recording database with the trials table's columns that configs_run reads."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE studies (id TEXT, space TEXT)")
        conn.execute("INSERT INTO studies VALUES ('st-1', '{}')")
        conn.execute(
            "CREATE TABLE trials (study_id TEXT, state TEXT, params TEXT, config TEXT, result TEXT)"
        )
        rows = [
            ("complete", RAN),
            ("complete", RAN),  # measured twice: one rule
            ("infeasible", {**RAN, "micro_batch_size": 4}),
            ("pruned", {**RAN, "micro_batch_size": 8}),  # never ran: still to measure
        ]
        conn.executemany(
            "INSERT INTO trials VALUES ('st-1', ?, ?, '{}', '{}')",
            [(s, json.dumps(p)) for s, p in rows],
        )
    return path


def test_a_later_session_prunes_what_the_recording_holds_and_nothing_else(
    tmp_path: Path,
) -> None:
    earlier = configs_run(_recording(tmp_path / "rec.db"))
    assert len(earlier) == 2
    assert session_space(SPACE, [], tmp_path) == SPACE  # a first session: the space as it is
    space = load_space(str(session_space(SPACE, earlier, tmp_path)))
    assert len(space.rules) == len(load_space(str(SPACE)).rules) + 2
    policy = make_policy(
        space.model_copy(update={"global_batch_tokens": 32768}),
        model=ModelSpec.resolve({"preset": "llama-1b"}),
    )
    for params, pruned in (
        (RAN, True),
        ({**RAN, "micro_batch_size": 4}, True),
        ({**RAN, "micro_batch_size": 8}, False),
        ({**RAN, "optimizer": "adamw-fused"}, False),
    ):
        full = {**params, "vocab_pad_multiple": 64}
        why = policy.screen(full, policy.knobs(full))
        said = getattr(why, "message", "") or ""
        assert ("earlier session" in said) is pruned, (params, why)
