"""Finding a trial's processes on this machine through /proc (Linux), for the crash tests."""

from __future__ import annotations

import os
from pathlib import Path

from workers import pidfile, preload


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def with_env(entry: str) -> list[int]:
    """Live (not zombie) processes whose environment holds `entry` ("NAME=value"): how a test
    finds the processes it started, even after they were re-parented."""
    needle = entry.encode()
    found = []
    for pid in pids():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle in env and alive(pid):
            found.append(pid)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def ray_task_worker(study_id: str, number: int) -> int | None:
    """The Ray worker process running trial `number` of the study (its title names the task)."""
    title = f"ray::trial {study_id}#{number}"
    for pid in pids():
        args = cmdline(pid)
        if args and args[0].startswith(title):
            return pid
    return None


def trial_process(study_id: str, number: int) -> int | None:
    """The process running that trial, fresh or forked by the pre-imported worker (whose
    command line is its server's): found by the pid file its launcher writes."""
    for trial in pidfile.running():
        if trial.study_id == study_id and trial.trial_number == number:
            return trial.pid
    return None


def trial_processes(study_id: str) -> list[int]:
    """Every live trial process of the study."""
    return [t.pid for t in pidfile.running() if t.study_id == study_id]


def forked(pid: int) -> bool:
    """Whether `pid` is a trial forked by the pre-imported worker (it names itself so)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == preload.TRIAL_NAME.decode()
    except OSError:
        return False


def preload_servers(entry: str) -> list[int]:
    """Live pre-imported workers (workers/preload.py) whose environment holds `entry`."""
    return [p for p in with_env(entry) if "workers.preload" in cmdline(p)]


def launched_with_env(entry: str) -> list[int]:
    """Live trial processes (fresh, forked, their loader and compile workers) whose environment
    holds `entry`, pre-imported workers left out: a server started by a trial's launcher carries
    that trial's environment in /proc and outlives it by design (its forked children, which show
    the same environment, count)."""
    servers = set(preload_servers(entry))
    return [p for p in with_env(entry) if p not in servers or forked(p)]
