"""The pre-imported worker: one long-lived process per node that has imported torch (no CUDA
touched) and forks a fresh child per trial, so a trial no longer pays torch's import.

On a loaded 2-core CPU, `import torch` + `torch._dynamo` took 8-12 s of a 10-20 s cpu-demo
trial (bench/trial_overhead.py); the child of a fork starts with both in memory.

The same guarantees as a fresh process (workers/launch.py):
- every trial is its own process (a fork of a server that never runs a trial, never touches
  CUDA and never builds a model), in its own session and process group, so a crash, an OOM or
  a hang ends with it and the launcher's timeout kills its whole group as before;
- its exit status reaches the launcher unchanged (a signal is a negative returncode), so a
  kill -9 or a segfault is recorded as a `crash` naming the signal;
- the launcher dying kills it: the server kills the child's group when the launcher's
  connection closes, and the child's parent-death signal is armed against the server;
- its environment is the launcher's, as a fresh process's would be. Variables read when torch
  is imported (TORCH*, PYTORCH*, OMP_*, MKL_*, PYTHON*, LD_*, ...: `_IMPORT_PREFIXES`) cannot
  change in a forked child, so they are part of the server's key: a trial whose environment
  differs in one of them gets another server (or a fresh process while it starts). The two
  cache directories (per study) and NCCL's variables are read later, at first use.

The server is single-threaded (a select loop), so forking it is safe; it listens on a Unix
socket named by the key (the interpreter, this checkout's code, those variables) and exits
after IDLE_EXIT_S without a trial. The first trial that finds none starts one in the
background and runs in a fresh process itself. Multi-GPU trials always start fresh ranks.
Off with AUTOTUNER_PRELOAD=0.

Protocol (one connection per trial): the launcher sends one JSON line {argv, env, cwd, stdout,
stderr}; the server answers {"pid": ...} once forked and {"status": <wait status>} once it
reaped the child.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ENABLE_ENV = "AUTOTUNER_PRELOAD"
IDLE_EXIT_S = 300.0
_REPO_ROOT = Path(__file__).resolve().parent.parent
# Environment read at interpreter start or torch's import: part of the server's key.
_IMPORT_PREFIXES = (
    "PYTHON",
    "LD_",
    "TORCH",
    "PYTORCH",
    "OMP_",
    "KMP_",
    "GOMP_",
    "MKL_",
    "OPENBLAS_",
    "CUDA_HOME",
    "CUDA_PATH",
    "TRITON_",
)
# Read lazily, at first use: may differ per trial (per study, per Ray task).
_LAZY = frozenset({"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "PYTHONUNBUFFERED"})


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "1") != "0" and sys.platform.startswith("linux")


def _code_stamp() -> str:
    """The checkout's Python sources (path, size, mtime): an edit means another server."""
    parts = []
    for package in ("autotuner", "workers"):
        for path in sorted((_REPO_ROOT / package).rglob("*.py")):
            st = path.stat()
            parts.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(parts)


def server_key(python: str, env: dict[str, str]) -> str:
    relevant = sorted(
        (k, v) for k, v in env.items() if k.startswith(_IMPORT_PREFIXES) and k not in _LAZY
    )
    text = json.dumps([python, str(_REPO_ROOT), relevant]) + _code_stamp()
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def socket_path(key: str) -> Path:
    # AF_UNIX paths are limited to ~107 bytes: a short name in the temp dir.
    return Path(tempfile.gettempdir()) / f"autotuner-preload-{os.getuid()}-{key}.sock"


# --------------------------------------------------------------------------- launcher side


class ForkedProcess:
    """A trial forked by the server, with the parts of subprocess.Popen the launcher uses."""

    def __init__(self, conn: socket.socket, pid: int) -> None:
        self._conn, self._buf = conn, b""
        self.pid = pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._conn], [], [], left)
            if not ready:
                raise subprocess.TimeoutExpired("forked trial", timeout or 0.0)
            chunk = self._conn.recv(4096)
            if not chunk:  # the server died: its children got SIGKILL (parent-death signal)
                self.returncode = -signal.SIGKILL
                break
            self._buf += chunk
            if b"\n" in self._buf:
                status = json.loads(self._buf.split(b"\n", 1)[0])["status"]
                self.returncode = os.waitstatus_to_exitcode(status)
        self._conn.close()
        return self.returncode


def fork_trial(
    python: str, argv: list[str], env: dict[str, str], cwd: str, stdout: Path, stderr: Path
) -> ForkedProcess | None:
    """Start a trial as a child of this node's server; None when no server answers (one is
    started in the background for the next trial: run this one in a fresh process)."""
    path = socket_path(server_key(python, env))
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
        request = {"argv": argv, "env": env, "cwd": cwd, "stdout": str(stdout)}
        request["stderr"] = str(stderr)
        conn.sendall(json.dumps(request).encode() + b"\n")
        conn.settimeout(30.0)
        reply = b""
        while b"\n" not in reply:
            chunk = conn.recv(4096)
            if not chunk:
                raise ConnectionError("the pre-imported worker closed the connection")
            reply += chunk
        conn.settimeout(None)
        head, rest = reply.split(b"\n", 1)
        proc = ForkedProcess(conn, int(json.loads(head)["pid"]))
        proc._buf = rest
        return proc
    except (OSError, ValueError, KeyError):
        conn.close()
        _start_server(python, env, path)
        return None


def _start_server(python: str, env: dict[str, str], path: Path) -> None:
    """Start a server for `path` unless one is starting already (a lock file names it)."""
    lock = path.with_suffix(".starting")
    with contextlib.suppress(OSError):
        if time.time() - lock.stat().st_mtime < 120:
            return  # another launcher started one less than two minutes ago
        lock.unlink()
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError:
        return
    os.close(fd)
    server_env = {k: v for k, v in env.items() if k not in _LAZY}
    with open(os.devnull, "rb") as null_in, open(path.with_suffix(".log"), "ab") as log:
        subprocess.Popen(
            [python, "-m", "workers.preload", "--socket", str(path)],
            stdin=null_in,
            stdout=log,
            stderr=log,
            env=server_env,
            cwd=tempfile.gettempdir(),
            start_new_session=True,  # and it forks once more: no launcher's child
        )


# --------------------------------------------------------------------------- server side


TRIAL_NAME = b"autotuner-trial"


def _set_name(name: bytes) -> None:
    import ctypes

    pr_set_name = 15
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(pr_set_name, name, 0, 0, 0)


def _preload() -> None:
    """What every trial imports first (workers/trial.py run_trial): torch, dynamo, models."""
    import torch
    import torch._dynamo  # noqa: F401

    import workers.models.factory
    import workers.models.gpt
    import workers.models.llama
    import workers.trial  # noqa: F401
    from workers.failures import compile_error_types

    compile_error_types()


def _child(request: dict, server_pid: int, close: list[socket.socket]) -> None:
    """In the forked child: become the trial's process and run it; never returns."""
    rc = 1
    try:
        for s in close:
            s.close()
        os.setsid()  # its own session and process group, as start_new_session gives
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's handler is not the trial's
        _set_name(TRIAL_NAME)  # `ps` and `top` tell a trial from its server
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        env = dict(request["env"])
        from workers.launch import PARENT_ENV

        env[PARENT_ENV] = str(server_pid)  # the parent-death signal is armed against us
        os.environ.clear()
        os.environ.update(env)
        os.chdir(request["cwd"])
        import workers.trial as trial

        trial.restart_clock()
        sys.argv = ["workers.trial", *request["argv"]]
        rc = trial.main(request["argv"]) or 0
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(rc)


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(0)  # through serve's finally: the socket goes with the server


def serve(path: Path) -> None:
    signal.signal(signal.SIGTERM, _stop)
    _preload()
    import torch

    if torch.cuda.is_initialized():  # a child would inherit a CUDA context: never fork then
        print("workers.preload: CUDA was initialised by an import; not serving", file=sys.stderr)
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = path.with_suffix(f".{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    listener.bind(str(tmp))
    listener.listen(16)
    os.replace(tmp, path)  # atomic: a launcher never connects to a half-started server
    with contextlib.suppress(FileNotFoundError):
        path.with_suffix(".starting").unlink()
    children: dict[socket.socket, int] = {}
    last = time.monotonic()
    try:
        while True:
            ready, _, _ = select.select([listener, *children], [], [], 0.2)
            for s in ready:
                if s is listener:
                    conn, _ = listener.accept()
                    pid = _fork_one(conn, listener, list(children))
                    if pid is not None:
                        children[conn] = pid
                    last = time.monotonic()
                elif not s.recv(1):  # the launcher is gone: so is its trial
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(children[s], signal.SIGKILL)
            _reap(children)
            if children:
                last = time.monotonic()
            elif time.monotonic() - last > IDLE_EXIT_S or not path.exists():
                return
    finally:
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(listener.fileno()).st_ino:
                path.unlink()
        listener.close()


def _fork_one(
    conn: socket.socket, listener: socket.socket, others: list[socket.socket]
) -> int | None:
    try:
        conn.settimeout(10.0)
        data = b""
        while b"\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                raise ConnectionError("no request")
            data += chunk
        conn.settimeout(None)
        request = json.loads(data.split(b"\n", 1)[0])
    except (OSError, ValueError):
        conn.close()
        return None
    server_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        _child(request, server_pid, [listener, conn, *others])
    try:
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    except OSError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return pid


def _reap(children: dict[socket.socket, int]) -> None:
    by_pid = {pid: conn for conn, pid in children.items()}
    while by_pid:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = by_pid.pop(pid, None)
        if conn is None:
            continue
        del children[conn]
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"status": status}).encode() + b"\n")
        conn.close()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="workers.preload", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, type=Path)
    args = parser.parse_args(argv)
    if os.fork() != 0:  # detach: the launcher that started us may exit (a Ray task does)
        return 0
    serve(args.socket)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
