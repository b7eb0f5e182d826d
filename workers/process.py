"""The process plumbing every launcher shares: a trial's environment, its process group, its
stderr's tail, and what a launched trial process does first.

A leaf of `workers/`: the single-trial launcher (launch.py), the rank launcher
(launch_ranks.py), the pre-imported worker (preload.py), the trial process (trial.py) and the
ranks' process group (distributed.py) all import it, and it imports none of them, so none of
them has to import another for a constant or a helper. No torch: the launchers run in the
coordinator's Ray task.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
from pathlib import Path

from autotuner.spec import TrialConfig
from workers import compile_cache
from workers.service_secrets import without_secrets

HEARTBEAT_INTERVAL_S = 5.0
KILL_GRACE_S = 3.0  # SIGTERM first so the CUDA context is torn down cleanly, then SIGKILL
STDERR_TAIL_LINES = 20
REPO_ROOT = str(Path(__file__).resolve().parent.parent)

PARENT_ENV = "AUTOTUNER_TRIAL_PARENT_PID"
LIMIT_ENV = "AUTOTUNER_TRIAL_LIMIT_S"  # the wall-clock limit, for the ranks' collective timeout
# A rank that stopped because another rank failed exits with this status and writes nothing;
# the launcher (workers/launch_ranks.py) reports the rank that failed first.
PEER_FAILED_EXIT = 75


def stderr_tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    """The last `lines` lines of a trial's stderr file ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def kill_group(pgid: int, sig: int) -> None:
    """Send `sig` to process group `pgid`; a group that is gone already is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


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

    Why: cuDNN compiles its attention kernels at run time, and the cache that spares the next
    process that compile misses in a directory it has not seen, so a fresh directory per trial
    would pay the attention probe's compile in every cuDNN trial (measured on the H200:
    bench/results/h200_session_20261204c). Warm-up only: a measured step never includes it.
    """
    path = Path(tempfile.gettempdir()) / f"autotuner-trials-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def trial_env(config: TrialConfig | None, trial_tmp: Path | None = None) -> dict[str, str]:
    """The environment a trial's process gets; with no config, what every trial's has in
    common (prestart_preload's: the pre-imported worker's key reads only that part). Never
    the service's secrets (workers/service_secrets.py), whatever the launcher's own holds."""
    env = dict(os.environ)
    env[PARENT_ENV] = str(os.getpid())
    if config is not None:
        env.update(compile_cache.cache_env(config, trial_tmp))  # the study's compile cache
        env.update(config.env)
    # The trial imports `workers` and `autotuner` from this checkout, wherever it runs from.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Last, so neither the launcher's environment nor config.env can hand a trial a secret.
    return without_secrets(env)
