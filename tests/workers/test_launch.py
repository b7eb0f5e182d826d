"""run_trial_process: each way a trial can end, provoked for real in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import workers.process as process
from autotuner.spec import FailureClass, TrialConfig, TrialResult, TrialStatus
from workers.launch import run_trial_process

from .conftest import FAST, make_config

REPO = Path(__file__).resolve().parents[2]


def test_ok_trial_with_heartbeats(monkeypatch):
    # A fresh interpreter: a trial forked from a pre-imported worker that an earlier test left
    # (owned by this pytest process) can end in 0.2 s, before a second heartbeat.
    monkeypatch.setenv("AUTOTUNER_PRELOAD", "0")
    monkeypatch.setattr(process, "HEARTBEAT_INTERVAL_S", 0.2)
    beats = []
    result = run_trial_process(make_config(), on_heartbeat=lambda: beats.append(time.time()))
    assert result.status == TrialStatus.OK, result.error_message
    assert result.wall_s > 0 and len(beats) >= 2  # torch's import alone outlasts 0.4 s


def test_oom_under_a_memory_cap_exits_cleanly():
    # 16 x 1024 tokens of fp32 math attention: the score matrices alone need > 256 MiB.
    measure = FAST.model_copy(update={"memory_limit_gib": 0.25})
    config = make_config(model={"seq_len": 1024}, micro_batch_size=16, measure=measure)
    result = run_trial_process(config)
    assert result.failure_class == FailureClass.OOM, result.error_message
    assert result.memory_limit_gib == 0.25
    assert result.required_mem_gib is not None and result.required_mem_gib > 0
    assert not any("exited with status" in n for n in result.notes)  # it exited 0


def test_nan_loss_is_numerics():
    result = run_trial_process(make_config(fault="nan_loss"))
    assert result.failure_class == FailureClass.NUMERICS
    assert "nan" in result.error_message


@pytest.mark.timing  # ends within seconds of its limit
def test_hang_is_killed_at_the_limit():
    # The limit leaves room to reach the hang (torch's import and the model: ~2 s here, over
    # 6 s on a loaded machine), so that the stderr tail has the fault's line in it.
    limit_s = 12
    start = time.monotonic()
    result = run_trial_process(make_config(fault="hang"), timeout_s=limit_s)
    elapsed = time.monotonic() - start
    assert result.failure_class == FailureClass.TIMEOUT
    assert limit_s <= result.wall_s < limit_s + process.KILL_GRACE_S + 3
    assert elapsed < limit_s + process.KILL_GRACE_S + 6
    assert "sleeping forever" in result.error_message  # the stderr tail travels along


def test_timeout_defaults_to_measure_timeout():
    config = make_config(fault="hang", measure=FAST.model_copy(update={"timeout_s": 5}))
    result = run_trial_process(config)
    assert result.failure_class == FailureClass.TIMEOUT and result.wall_s < 12


def test_segfault_is_a_crash_naming_the_signal():
    result = run_trial_process(make_config(fault="segfault"))
    assert result.failure_class == FailureClass.CRASH
    assert "SIGSEGV" in result.error_message


def test_exit_without_result_is_a_crash_with_stderr():
    result = run_trial_process(make_config(fault="exit"))
    assert result.failure_class == FailureClass.CRASH
    assert "status 3" in result.error_message and "no result" in result.error_message


def test_trial_env_carries_config_env_and_the_repo(tmp_path):
    config = make_config()
    config.env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    env = process.trial_env(config)
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert str(REPO) in env["PYTHONPATH"].split(":")


def test_process_env_sets_nccl_knobs_before_torch(monkeypatch):
    from workers.trial import apply_process_env

    for name in ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "AUTOTUNER_X"):
        monkeypatch.delenv(name, raising=False)
    config = make_config(nccl_algo="Ring", nccl_proto="LL128", nccl_min_channels=8)
    config.env = {"AUTOTUNER_X": "1"}
    apply_process_env(config)
    import os

    assert (os.environ["NCCL_ALGO"], os.environ["NCCL_PROTO"]) == ("Ring", "LL128")
    assert os.environ["NCCL_MIN_NCHANNELS"] == "8" and os.environ["AUTOTUNER_X"] == "1"


def _cli(args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "workers.trial", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def test_cli_round_trips_json_via_stdin_and_stdout():
    config = make_config()
    proc = _cli(["--config", "-", "--result", "-"], stdin=config.model_dump_json())
    assert proc.returncode == 0, proc.stderr
    result = TrialResult.model_validate_json(proc.stdout)
    assert result.status == TrialStatus.OK
    assert result.tokens_per_step == config.knobs.micro_batch_size * config.model.seq_len


def test_cli_round_trips_json_via_files(tmp_path):
    cfg, out = tmp_path / "cfg.json", tmp_path / "out.json"
    cfg.write_text(make_config(precision="tf32").model_dump_json())
    proc = _cli(["--config", str(cfg), "--result", str(out)])
    assert proc.returncode == 0, proc.stderr
    result = TrialResult.model_validate(json.loads(out.read_text()))
    assert result.failure_class == FailureClass.UNSUPPORTED


def test_cli_rejects_a_bad_config(tmp_path):
    proc = _cli(["--config", "-", "--result", "-"], stdin='{"model": {}}')
    assert proc.returncode == 2 and "cannot read the config" in proc.stderr


def test_signature_is_the_coordinators_contract():
    import inspect

    sig = inspect.signature(run_trial_process)
    assert list(sig.parameters) == ["config", "timeout_s", "python", "on_heartbeat"]
    assert all(
        sig.parameters[p].kind == inspect.Parameter.KEYWORD_ONLY
        for p in ("timeout_s", "python", "on_heartbeat")
    )
    assert sig.parameters["config"].annotation in (TrialConfig, "TrialConfig")


@pytest.mark.parametrize("bad_python", ["/nonexistent/python"])
def test_missing_interpreter_raises(bad_python):
    with pytest.raises(FileNotFoundError):
        run_trial_process(make_config(), python=bad_python)
