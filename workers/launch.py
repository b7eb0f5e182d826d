"""Run one trial in a fresh process and turn however it ended into a TrialResult.

This runs inside the coordinator's Ray task, so it imports no torch: the trial's process does.
A fresh process per trial is what makes a measurement honest (no allocator, compile cache or
CUDA context left over from another config) and what makes a hang or a segfault survivable.

How it ended                          -> result
  wrote a result file                 -> that result (wall_s replaced by the launcher's)
  still running at the wall-clock cap -> `timeout` (its whole process group killed)
  killed by a signal                  -> `crash`, naming the signal
  exited non-zero without a result    -> `crash`, with the last lines of its stderr

A trial on several GPUs (num_gpus > 1) runs one process per rank: workers/launch_ranks.py.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from autotuner.spec import FailureClass, TrialConfig, TrialResult
from workers import phases, pidfile, preload_client, process


def _terminate(proc: subprocess.Popen | preload_client.ForkedProcess) -> None:
    process.kill_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=process.KILL_GRACE_S)
    process.kill_group(proc.pid, signal.SIGKILL)
    proc.wait()


def prestart_preload(python: str = sys.executable) -> None:
    """Start this node's pre-imported worker now, for trials to come (workers/preload.py).

    The Ray executor's GPU probe calls it before a study's first trial: the server imports
    torch while the probe does and the study starts, so the first trial is forked rather than
    importing torch itself (on the H200 node it waited 4.0 s for the server instead of
    importing for 7.0 s: bench/results/h200_session_20261204d). A trial whose environment
    differs in a variable read at import still gets its own server."""
    if preload_client.enabled():
        preload_client.start_server(python, process.trial_env(None))


def run_trial_process(
    config: TrialConfig,
    *,
    timeout_s: float | None = None,
    python: str = sys.executable,
    on_heartbeat: Callable[[], None] | None = None,
) -> TrialResult:
    """Run `python -m workers.trial` for `config` in a fresh process group and wait for it.

    timeout_s defaults to config.measure.timeout_s. on_heartbeat is called every few seconds
    while the trial runs (the coordinator uses it to keep the trial's lease alive).
    """
    if config.num_gpus > 1:
        from workers.launch_ranks import run_rank_processes

        return run_rank_processes(
            config, timeout_s=timeout_s, python=python, on_heartbeat=on_heartbeat
        )
    limit = config.measure.timeout_s if timeout_s is None else timeout_s
    with tempfile.TemporaryDirectory(prefix="autotuner-trial-") as tmp:
        tmpdir = Path(tmp)
        cfg_path, result_path = tmpdir / "config.json", tmpdir / "result.json"
        stdout_path, stderr_path = tmpdir / "stdout.log", tmpdir / "stderr.log"
        cfg_path.write_text(config.model_dump_json())
        env = process.trial_env(config, tmpdir)
        workdir = process.trial_workdir()
        start = time.monotonic()
        env[phases.SPAWNED_AT_ENV] = repr(time.time())
        argv = ["--config", str(cfg_path), "--result", str(result_path)]
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            # A child of the node's pre-imported worker when one runs (workers/preload.py):
            # the same isolation, without torch's import. Else (the first trial, while one
            # starts) a fresh interpreter.
            proc: subprocess.Popen | preload_client.ForkedProcess | None = None
            if preload_client.enabled():
                proc = preload_client.fork_trial(
                    python, argv, env, str(workdir), stdout_path, stderr_path
                )
            started = "fresh" if proc is None else "forked"
            if proc is None:
                proc = subprocess.Popen(
                    [python, "-m", "workers.trial", *argv],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,  # a file, not a pipe: a chatty trial can never block on it
                    env=env,
                    cwd=workdir,
                    start_new_session=True,  # its own process group: loader/compile workers too
                )
            # Which process is this trial: a forked one has its server's command line.
            pidfile.write(tmpdir, proc.pid)
            timed_out = False
            while True:
                remaining = limit - (time.monotonic() - start)
                if remaining <= 0:
                    timed_out = True
                    _terminate(proc)
                    break
                try:
                    proc.wait(timeout=min(process.HEARTBEAT_INTERVAL_S, remaining))
                    break
                except subprocess.TimeoutExpired:
                    if on_heartbeat is not None:
                        on_heartbeat()
            # The trial is over: anything it left in its group (loader workers, inductor's
            # compile pool) goes with it.
            process.kill_group(proc.pid, signal.SIGKILL)
        wall_s = time.monotonic() - start
        result = _ending(proc.returncode, timed_out, limit, result_path, stderr_path, wall_s)
        result.process_start = started
        return result


def _ending(
    rc: int | None,
    timed_out: bool,
    limit: float,
    result_path: Path,
    stderr_path: Path,
    wall_s: float,
) -> TrialResult:
    """The TrialResult of a trial process that ended (see the module docstring's table)."""
    tail = process.stderr_tail(stderr_path)
    if timed_out:
        return TrialResult.failure(
            FailureClass.TIMEOUT,
            f"trial still running after {limit:.0f} s; its process group was killed"
            + (f"\nlast stderr lines:\n{tail}" if tail else ""),
            wall_s=wall_s,
        )
    if result_path.exists():
        try:
            result = TrialResult.model_validate_json(result_path.read_text())
        except ValueError as exc:
            return TrialResult.failure(
                FailureClass.CRASH,
                f"the trial wrote an unreadable result ({exc}); exit status {rc}",
                wall_s=wall_s,
            )
        phases.finish(result, wall_s)
        if rc != 0:
            result.notes.append(f"the trial process exited with status {rc} after its result")
        return result
    rc = -signal.SIGKILL if rc is None else rc
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.valid_signals() else f"signal {-rc}"
        return TrialResult.failure(
            FailureClass.CRASH,
            f"trial process died by {name}" + (f"\nlast stderr lines:\n{tail}" if tail else ""),
            wall_s=wall_s,
        )
    return TrialResult.failure(
        FailureClass.CRASH,
        f"trial process exited with status {rc} without a result"
        + (f"\nlast stderr lines:\n{tail}" if tail else ""),
        wall_s=wall_s,
    )
