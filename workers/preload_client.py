"""The launcher's side of the pre-imported worker (workers/preload.py): which server a trial's
environment needs (its key), starting it, waiting for one still importing, and asking it to
fork a trial (`fork_trial`, a `ForkedProcess` to wait on as on a Popen). The server itself, and
the guarantees a forked trial keeps, are in workers/preload.py.
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
from pathlib import Path

from workers.service_secrets import without_secrets

ENABLE_ENV = "AUTOTUNER_PRELOAD"


OWNER_ENV = "AUTOTUNER_PRELOAD_OWNER"  # a pid: the server exits when this process does


RAYLET_ENV = "RAY_RAYLET_PID"  # set by Ray in its workers (they fate-share with the raylet)


# How long after a server's start a launcher waits for it instead of starting its trial fresh:
# well past torch's import on a loaded machine (8-12 s on 2 cores, ~7 s on the H200 node).
START_WAIT_S = 30.0


FAILED_MARK = b"failed"  # written into the start lock by a server that cannot serve


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


# A rank's place in its trial (workers/launch_ranks.py): the server that a rank's launcher
# starts is no rank, and must not look like one to whatever reads its environment.
_RANK_VARS = frozenset(
    {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
)


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


def owner_pid(env: dict[str, str]) -> int:
    """The process a server started for a launcher with environment `env` belongs to."""
    for name in (OWNER_ENV, RAYLET_ENV):
        value = env.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return os.getpid()  # the launcher itself: a test, a script, a trial run by hand


def socket_path(key: str, owner: int) -> Path:
    # AF_UNIX paths are limited to ~107 bytes: a short name in the temp dir. The owner is in
    # the name: two owners (two `tune` runs, each with its own local Ray) never share a server,
    # so one ending never kills the other's trials.
    return Path(tempfile.gettempdir()) / f"autotuner-preload-{os.getuid()}-{owner}-{key}.sock"


def server_path(python: str, env: dict[str, str]) -> Path:
    """The socket of the server that forks trials for a launcher with `python` and `env`."""
    return socket_path(server_key(python, env), owner_pid(env))


def start_server(python: str, env: dict[str, str]) -> Path:
    """Start the server for `python` and `env` unless one runs or is starting; its socket
    (which exists once it answers)."""
    path = server_path(python, env)
    if not path.exists():
        _start_server(python, env, path, owner_pid(env))
    return path


class ForkedProcess:
    """A trial forked by the server, with the parts of subprocess.Popen the launcher uses."""

    def __init__(self, conn: socket.socket, pid: int) -> None:
        self._conn, self._buf = conn, b""
        self.pid = pid
        self.returncode: int | None = None

    def fileno(self) -> int:
        """Readable once the trial has ended (its status arrives) or the server has died:
        something to poll beside other processes' pidfds (workers/launch_ranks.py)."""
        return self._conn.fileno()

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.wait(timeout=0)
        return self.returncode

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
    started in the background for the next trial: run this one in a fresh process).

    A server that another launcher started and that is still importing is waited for (up to
    START_WAIT_S after its start): its import is under way, a fresh process's would begin from
    nothing, and on a small machine the two imports would slow each other down."""
    path = server_path(python, env)
    conn = _connect(path)
    if conn is None and _wait_for_start(path):
        conn = _connect(path)
    if conn is None:
        _start_server(python, env, path, owner_pid(env))
        return None
    try:
        request = {"argv": argv, "env": env, "cwd": cwd, "stdout": str(stdout)}
        request["stderr"] = str(stderr)
        conn.sendall(json.dumps(request).encode() + b"\n")
        head, rest = read_line(conn, 30.0, "the pre-imported worker closed the connection")
        proc = ForkedProcess(conn, int(json.loads(head)["pid"]))
        proc._buf = rest
        return proc
    except (OSError, ValueError, KeyError):
        conn.close()
        _start_server(python, env, path, owner_pid(env))
        return None


def _connect(path: Path) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
        return conn
    except OSError:
        conn.close()
        return None


def _wait_for_start(path: Path) -> bool:
    """Wait while a server for `path` is starting (its start lock, younger than START_WAIT_S
    and not marked failed); True once it answers."""
    lock = path.with_suffix(".starting")
    while not path.exists():
        try:
            age = time.time() - lock.stat().st_mtime
            failed = lock.read_bytes() == FAILED_MARK
        except OSError:  # no lock: none is starting, or it answered a moment ago
            return path.exists()
        if failed or age >= START_WAIT_S:
            return False
        time.sleep(0.05)
    return True


def _start_server(python: str, env: dict[str, str], path: Path, owner: int) -> None:
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
    # The server's own environment has no secret either: a forked trial inherits its memory.
    server_env = {k: v for k, v in without_secrets(env).items() if k not in _LAZY | _RANK_VARS}
    with open(os.devnull, "rb") as null_in, open(path.with_suffix(".log"), "ab") as log:
        subprocess.Popen(
            [python, "-m", "workers.preload", "--socket", str(path), "--owner", str(owner)],
            stdin=null_in,
            stdout=log,
            stderr=log,
            env=server_env,
            cwd=tempfile.gettempdir(),
            start_new_session=True,  # and it forks once more: no launcher's child
        )


def read_line(conn: socket.socket, timeout_s: float, closed: str) -> tuple[bytes, bytes]:
    """One newline-ended message of the launcher/server protocol (JSON on one line), and what
    came after it; ConnectionError(`closed`) when the peer closes before the newline."""
    conn.settimeout(timeout_s)
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError(closed)
        data += chunk
    conn.settimeout(None)
    line, rest = data.split(b"\n", 1)
    return line, rest
