"""Requests for models or trials beyond any GPU cluster are refused at the edge, with the limit."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from autotuner.executors.base import Target
from autotuner.inputs import UserError
from autotuner.study.data_access import DataAccess
from autotuner.study.operations import validate_request
from autotuner.study.request import StudyRequest
from tests.unit.test_cli_errors import run_cli

# Each size within its per-field bound; together ~5e13 parameters (the example).
HUGE = {
    "preset": "tiny",
    "n_layer": 1024,
    "d_model": 65536,
    "n_head": 64,
    "vocab_size": 4_000_000,
    "seq_len": 1_048_576,
}


@pytest.mark.parametrize(
    ("fields", "needles"),
    [
        ({"model": HUGE}, ["model", "parameters", "limit of 2e+12"]),
        (
            {"model": {"preset": "tiny", "d_model": 65536, "n_head": 64, "seq_len": 1_048_576}},
            ["seq_len x d_model", "limit of 1.72e+10"],
        ),
        (
            {"model": {**HUGE, "d_model": 8192, "vocab_size": 512}},
            ["FLOPs per token", "limit of 1e+14"],
        ),
        ({"model": "tiny", "gpus_per_trial": 1024}, ["gpus_per_trial", "limit of 512"]),
        ({"model": "tiny", "name": "evil\x1b]0;pwned\x07"}, ["name", "U+001B"]),
        ({"model": "tiny", "name": "rtl\u202etxt"}, ["name", "U+202E"]),
    ],
    ids=["params", "seq-x-width", "flops", "gpus", "name-esc", "name-bidi"],
)
def test_absurd_requests_are_refused_with_the_limit(
    fields: dict[str, object], needles: list[str]
) -> None:
    with pytest.raises(ValidationError) as caught:
        StudyRequest.model_validate({"max_trials": 1, **fields})
    text = str(caught.value)
    assert all(n in text for n in needles), text


@pytest.mark.parametrize(
    "model", ["gpt2-1.5b", "llama-8b", {"preset": "llama-8b", "seq_len": 131072}]
)
def test_real_models_pass(model: object) -> None:
    StudyRequest.model_validate({"model": model, "max_trials": 1, "gpus_per_trial": 512})


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpus", "1024"], "--gpus"),
        (["--name", "x\x1b[2J"], "U+001B"),
        ([], "over the limit of 2e+12"),
    ],
)
def test_submit_refuses_absurd_requests_in_one_line_and_writes_nothing(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    spec = tmp_path / "m.json"
    spec.write_text(json.dumps(HUGE if not args else {"preset": "tiny"}))
    db_file = tmp_path / "r.db"
    proc = run_cli(
        "submit", str(spec), "--space", "cpu-demo", *args, "--db", f"sqlite:///{db_file}"
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], proc.stderr
    assert not db_file.exists()


@pytest.mark.parametrize(
    ("target", "gpus", "needle"),
    [
        (Target("cpu", 0), 4, "the cluster has no GPU"),
        (Target("cuda", 2, "H200", (9, 0), 141.0), 4, "the cluster has 2 GPU(s)"),
    ],
)
def test_more_gpus_per_trial_than_the_cluster_has_is_refused(
    target: Target, gpus: int, needle: str
) -> None:
    """Issue 42: `--gpus 4` on a machine with no GPU was accepted and ran one CPU process."""
    request = StudyRequest.model_validate(
        {"model": "tiny", "space": "cpu-demo", "max_trials": 1, "gpus_per_trial": gpus}
    )
    with pytest.raises(UserError, match=re.escape(needle)):
        validate_request(request, target, data_access=DataAccess.nowhere())
    one = request.model_copy(update={"gpus_per_trial": 1})
    validate_request(one, target, data_access=DataAccess.nowhere())  # one is always there
