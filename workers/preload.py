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
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from workers import process
from workers.preload_client import FAILED_MARK, read_line
from workers.service_secrets import without_secrets

IDLE_EXIT_S = 300.0
OWNER_POLL_S = 0.2  # how often the owner is looked at where the kernel has no pidfd


# --------------------------------------------------------------------------- launcher side


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
        line, _ = read_line(conn, 10.0, "no request")
        request = json.loads(line)
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
