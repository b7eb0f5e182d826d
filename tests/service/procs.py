"""Finding a trial's processes on this machine through /proc (Linux), for the crash tests."""

from __future__ import annotations

import json
import os
from pathlib import Path


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
    """The `python -m workers.trial --config FILE` process running that trial."""
    for pid in pids():
        args = cmdline(pid)
        if "workers.trial" not in args or "--config" not in args:
            continue
        try:
            config = json.loads(Path(args[args.index("--config") + 1]).read_text())
        except (OSError, ValueError, IndexError):
            continue
        if config.get("study_id") == study_id and config.get("trial_number") == number:
            return pid
    return None


def trial_processes(study_id: str) -> list[int]:
    """Every live trial process of the study."""
    out = []
    for pid in pids():
        args = cmdline(pid)
        if "workers.trial" not in args or "--config" not in args:
            continue
        try:
            config = json.loads(Path(args[args.index("--config") + 1]).read_text())
        except (OSError, ValueError, IndexError):
            continue
        if config.get("study_id") == study_id and alive(pid):
            out.append(pid)
    return out
