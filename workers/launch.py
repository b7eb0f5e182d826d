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
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from autotuner.spec import FailureClass, TrialConfig, TrialResult
from workers import compile_cache, phases, pidfile, preload
from workers.service_secrets import without_secrets

HEARTBEAT_INTERVAL_S = 5.0
KILL_GRACE_S = 3.0  # SIGTERM first so the CUDA context is torn down cleanly, then SIGKILL
STDERR_TAIL_LINES = 20
_REPO_ROOT = str(Path(__file__).resolve().parent.parent)


def _stderr_tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(pgid, sig)


def _terminate(proc: subprocess.Popen | preload.ForkedProcess) -> None:
    _kill_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)
    _kill_group(proc.pid, signal.SIGKILL)
    proc.wait()


PARENT_ENV = "AUTOTUNER_TRIAL_PARENT_PID"
LIMIT_ENV = "AUTOTUNER_TRIAL_LIMIT_S"  # the wall-clock limit, for the ranks' collective timeout


def die_with_parent() -> None:
    """Called first thing in the trial process: if the launcher dies, the trial dies too.

    The trial runs in its own session (so a timeout can kill its whole group), which also means
    nothing kills it when its Ray worker is lost: on a GPU such an orphan would hold the device
    while the retry starts. Linux's parent-death signal closes that gap.
    """
    expected = os.environ.get(PARENT_ENV)
    if not expected or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(expected):  # the launcher died before the signal was armed
        os._exit(1)


def no_core_files() -> None:
    """Called first thing in a launched trial: a crash writes no core file. Trials share one
    working directory (trial_workdir) where nothing would remove it, and a GPU process's core
    runs to gigabytes; the crash is classified from its signal, which needs no core."""
    if not os.environ.get(PARENT_ENV):
        return  # run by hand: the user's own limits
    import resource

    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))


def trial_workdir() -> Path:
    """The working directory of every trial on this node: one stable directory, not the trial's
    own temporary one (which still holds its config, result and logs, passed by absolute path).

    Why: cuDNN compiles its attention kernels at run time and the cache that spares the next
    process that compile misses in a directory it has not seen. Measured on the H200
    (bench/results/h200_session_20261204c): the attention probe took 0.8-1.5 s in a new
    directory and 0.13-0.2 s in one seen before, so a fresh directory per trial paid it in
    every cuDNN trial. Warm-up only: a measured step never includes it either way.
    """
    path = Path(tempfile.gettempdir()) / f"autotuner-trials-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def _trial_env(config: TrialConfig | None, trial_tmp: Path | None = None) -> dict[str, str]:
    """The environment a trial's process gets; with no config, what every trial's has in
    common (prestart_preload's: the pre-imported worker's key reads only that part). Never
    the service's secrets (workers/service_secrets.py), whatever the launcher's own holds."""
    env = dict(os.environ)
    env[PARENT_ENV] = str(os.getpid())
    if config is not None:
        env.update(compile_cache.cache_env(config, trial_tmp))  # the study's compile cache
        env.update(config.env)
    # The trial imports `workers` and `autotuner` from this checkout, wherever it runs from.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO_ROOT, env.get("PYTHONPATH")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Last, so neither the launcher's environment nor config.env can hand a trial a secret.
    return without_secrets(env)


def prestart_preload(python: str = sys.executable) -> None:
    """Start this node's pre-imported worker now, for trials to come (workers/preload.py).

    The Ray executor's GPU probe calls it before a study's first trial: the server imports
    torch while the probe does and the study starts, so the first trial is forked rather than
    importing torch itself (on the H200 node it waited 4.0 s for the server instead of
    importing for 7.0 s: bench/results/h200_session_20261204d). A trial whose environment
    differs in a variable read at import still gets its own server."""
    if preload.enabled():
        preload.start_server(python, _trial_env(None))


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
        env = _trial_env(config, tmpdir)
        workdir = trial_workdir()
        start = time.monotonic()
        env[phases.SPAWNED_AT_ENV] = repr(time.time())
        argv = ["--config", str(cfg_path), "--result", str(result_path)]
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            # A child of the node's pre-imported worker when one runs (workers/preload.py):
            # the same isolation, without torch's import. Else (the first trial, while one
            # starts) a fresh interpreter.
            proc: subprocess.Popen | preload.ForkedProcess | None = None
            if preload.enabled():
                proc = preload.fork_trial(python, argv, env, str(workdir), stdout_path, stderr_path)
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
                    proc.wait(timeout=min(HEARTBEAT_INTERVAL_S, remaining))
                    break
                except subprocess.TimeoutExpired:
                    if on_heartbeat is not None:
                        on_heartbeat()
            # The trial is over: anything it left in its group (loader workers, inductor's
            # compile pool) goes with it.
            _kill_group(proc.pid, signal.SIGKILL)
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
    tail = _stderr_tail(stderr_path)
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
