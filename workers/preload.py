"""The pre-imported worker: one long-lived process per node that has imported torch (no CUDA
touched) and forks a fresh child per trial, so a trial does not pay torch's import.

On a loaded 2-core CPU, `import torch` + `torch._dynamo` took 8-12 s of a 10-20 s cpu-demo
trial (bench/trial_overhead.py); the child of a fork starts with both in memory.

The same guarantees as a fresh process (workers/launch.py):
- every trial is its own process (a fork of a server that never runs a trial, never touches
  CUDA and never builds a model), in its own session and process group, so a crash, an OOM or
  a hang ends with it and the launcher's timeout kills its whole group;
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
socket named by the key (the interpreter, this checkout's code, those variables) and by its
owner. On a GPU node the Ray executor's probe starts it before a study's first trial
(workers.launch.prestart_preload); a trial that finds one still importing waits for it (up to
START_WAIT_S after its start), and one that finds none starts one in the background and runs in
a fresh process itself. Off with AUTOTUNER_PRELOAD=0.

Nothing outlives its owner: the server belongs to the process that runs the node's trials,
the Ray node (its raylet: `RAY_RAYLET_PID`, which Ray sets in every worker) under Ray, else
the launcher (a test, a script calling run_trial_process), or AUTOTUNER_PRELOAD_OWNER when set.
The launcher is no owner under Ray: the Ray worker that runs a trial can be replaced between
trials, and the server serves the next. The server watches its owner (a pidfd, readable once
the process has exited; even while it is still importing torch) and exits with it, killing any
trial it still runs, so when `serve` or `tune` stops its local Ray, the server goes too. It
also exits after IDLE_EXIT_S without a trial.

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
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from workers import process
from workers.service_secrets import without_secrets

ENABLE_ENV = "AUTOTUNER_PRELOAD"
OWNER_ENV = "AUTOTUNER_PRELOAD_OWNER"  # a pid: the server exits when this process does
RAYLET_ENV = "RAY_RAYLET_PID"  # set by Ray in its workers (they fate-share with the raylet)
IDLE_EXIT_S = 300.0
# How long after a server's start a launcher waits for it instead of starting its trial fresh:
# well past torch's import on a loaded machine (8-12 s on 2 cores, ~7 s on the H200 node).
START_WAIT_S = 30.0
FAILED_MARK = b"failed"  # written into the start lock by a server that cannot serve
OWNER_POLL_S = 0.2  # how often the owner is looked at where the kernel has no pidfd
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


# --------------------------------------------------------------------------- launcher side


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
    # Not cuDNN's libraries: loading them before the fork saves a cuDNN trial nothing, as a
    # fresh process opens them in 0.1 s once they are cached (bench/results/h200_session_20261204).


def _child(request: dict, server_pid: int, close: list[socket.socket | int]) -> None:
    """In the forked child: become the trial's process and run it; never returns."""
    rc = 1
    try:
        for s in close:  # the server's sockets, and its pidfds of the other trials
            if isinstance(s, socket.socket):
                s.close()
            else:
                os.close(s)
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
        env = without_secrets(request["env"])  # whoever sent the request, no secret passes

        env[process.PARENT_ENV] = str(server_pid)  # the parent-death signal is armed against us
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


class _Owner:
    """The process the server belongs to. A pidfd where Linux has them (5.3+): it refers to
    that very process (never to a later one given the same pid) and becomes readable when the
    process exits, so the select loop wakes at once. Else its pid is polled."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd: int | None = None
        self._gone = False
        try:
            self.fd = os.pidfd_open(pid)
        except ProcessLookupError:
            self._gone = True  # it exited before we started
        except (OSError, AttributeError):
            pass  # no pidfd on this kernel: poll

    def gone(self) -> bool:
        if not self._gone and self.fd is not None:
            self._gone = bool(select.select([self.fd], [], [], 0)[0])
        elif not self._gone:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                self._gone = True
            except PermissionError:
                pass  # alive, someone else's: not ours to signal
        return self._gone


def _tidy(path: Path, *, starting: bool = False) -> None:
    """What a server leaves in the temp dir when it ends: its log unless something was written
    to it (each owner has its own: one per Ray node start), and, ended before it answered
    (`starting`), the start lock it still holds."""
    if starting:
        with contextlib.suppress(OSError):
            path.with_suffix(".starting").unlink()
    log = path.with_suffix(".log")
    with contextlib.suppress(OSError):
        if log.stat().st_size == 0:
            log.unlink()


def _mark_failed(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.with_suffix(".starting").write_bytes(FAILED_MARK)


def _watch_while_importing(owner: _Owner, path: Path) -> Callable[[], None]:
    """Exit as soon as the owner does, even in the middle of torch's import (seconds on a
    loaded machine): a thread, which the returned function stops (and joins) before the server
    forks anything."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(OWNER_POLL_S):
            if owner.gone():
                _tidy(path, starting=True)
                os._exit(0)

    thread = threading.Thread(target=watch, name="owner-watch", daemon=True)
    thread.start()

    def stop() -> None:
        done.set()
        thread.join()

    return stop


def serve(path: Path, owner_pid: int) -> None:
    signal.signal(signal.SIGTERM, _stop)
    owner = _Owner(owner_pid)
    stop_watching = _watch_while_importing(owner, path)
    try:
        _preload()
    except BaseException:
        _mark_failed(path)  # launchers stop waiting for us; the lock still spaces out restarts
        raise
    stop_watching()  # single-threaded from here: forking is safe
    if owner.gone():
        _tidy(path, starting=True)
        return
    import torch

    if torch.cuda.is_initialized():  # a child would inherit a CUDA context: never fork then
        print("workers.preload: CUDA was initialised by an import; not serving", file=sys.stderr)
        _mark_failed(path)
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = path.with_suffix(f".{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    listener.bind(str(tmp))
    # The socket file's inode (fstat of the listener gives the socket's own, never equal): at
    # exit the path is removed only if it is still ours, not a newer server's.
    ours = os.stat(tmp).st_ino
    listener.listen(16)
    os.replace(tmp, path)  # atomic: a launcher never connects to a half-started server
    with contextlib.suppress(FileNotFoundError):
        path.with_suffix(".starting").unlink()
    children: dict[socket.socket, int] = {}
    exits = _ChildExits()
    last = time.monotonic()
    watched = [] if owner.fd is None else [owner.fd]
    try:
        while True:
            ready, _, _ = select.select(
                [listener, *children, *watched, *exits.fds()], [], [], OWNER_POLL_S
            )
            if owner.gone():
                return  # the owner's trials go with it (finally), then the server
            for s in ready:
                if s is listener:
                    conn, _ = listener.accept()
                    pid = _fork_one(conn, listener, [*children, *exits.fds()])
                    if pid is not None:
                        children[conn] = pid
                        exits.watch(pid)
                    last = time.monotonic()
                elif isinstance(s, socket.socket) and not s.recv(1):
                    # the launcher is gone: so is its trial
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(children[s], signal.SIGKILL)
            _reap(children, exits)
            if children:
                last = time.monotonic()
            elif time.monotonic() - last > IDLE_EXIT_S or not path.exists():
                return
    finally:
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == ours:
                path.unlink()
        listener.close()
        # A trial still running (the owner went, or a SIGTERM): its whole group, not only the
        # child the parent-death signal reaches (loader workers, inductor's compile pool).
        for pid in children.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def _fork_one(
    conn: socket.socket, listener: socket.socket, others: list[socket.socket | int]
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


class _ChildExits:
    """A pidfd for each forked trial, in the server's select set: it becomes readable the
    moment that trial exits, so its launcher hears of it at once. Without them the exit waited
    for the loop's next OWNER_POLL_S tick: every H200 trial's wall_s was rounded up to a
    0.2 s step (0.1 s a trial on average, 2% of an eager GPT-2 study's wall). Where the kernel
    has no pidfds, the tick it is."""

    def __init__(self) -> None:
        self._by_pid: dict[int, int] = {}

    def watch(self, pid: int) -> None:
        with contextlib.suppress(OSError, AttributeError):  # gone already, or no pidfds here
            self._by_pid[pid] = os.pidfd_open(pid)

    def fds(self) -> list[int]:
        return list(self._by_pid.values())

    def reaped(self, pid: int) -> None:
        fd = self._by_pid.pop(pid, None)
        if fd is not None:
            os.close(fd)


def _reap(children: dict[socket.socket, int], exits: _ChildExits) -> None:
    by_pid = {pid: conn for conn, pid in children.items()}
    while by_pid:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        exits.reaped(pid)
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
    parser.add_argument("--owner", required=True, type=int, help="exit when this pid exits")
    args = parser.parse_args(argv)
    if os.fork() != 0:  # detach: the launcher that started us may exit (a Ray task does)
        return 0
    try:
        serve(args.socket, args.owner)
    finally:
        _tidy(args.socket)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
