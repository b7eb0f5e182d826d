"""Which process runs which trial, without reading command lines.

A trial forked by the pre-imported worker (workers/preload.py) carries its server's command line
(`python -m workers.preload --socket ...`), not `workers.trial --config FILE`, so neither an
operator's `ps` nor a test can tell from it which trial it is. The launcher therefore writes the
trial's pid into the trial's temp dir, beside its `config.json`, as soon as the process exists
(fresh or forked alike): `<tmp>/autotuner-trial-*/trial.pid` holds "<pid> <start time>".
Each rank of a multi-GPU trial (workers/launch_ranks.py) has one too:
`<tmp>/autotuner-ranks-*/rank<N>.pid`, N its local rank.

The start time (field 22 of /proc/<pid>/stat, in clock ticks since boot) guards against a
reused pid: a temp dir left by a launcher killed with -9 names a process that is gone, and its
pid may belong to another process by now; `running()` skips it.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

NAME = "trial.pid"
DIR_GLOB = "autotuner-trial-*"  # workers/launch.py's temp dirs
RANKS_DIR_GLOB = "autotuner-ranks-*"  # workers/launch_ranks.py's


def rank_name(local_rank: int) -> str:
    return f"rank{local_rank}.pid"


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of process `pid`; None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])  # fields 3 and 22 of proc(5)


def start_ticks(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot); None when it does not exist."""
    stat = _stat(pid)
    return stat[1] if stat else None


def write(trial_dir: Path, pid: int, name: str = NAME) -> None:
    """Record that `pid` runs the trial of `trial_dir` (written atomically: never half-read);
    `name`: rank_name(N) for a rank of a multi-GPU trial."""
    ticks = start_ticks(pid)
    tmp = trial_dir / f".{name}.tmp"
    tmp.write_text(f"{pid} {ticks if ticks is not None else -1}\n")
    tmp.replace(trial_dir / name)


@dataclass(frozen=True)
class TrialProcess:
    pid: int
    study_id: str | None
    trial_number: int | None
    trial_dir: Path
    rank: int | None = None  # a multi-GPU trial's local rank; None for a one-process trial


def _alive(pid: int, ticks: int) -> bool:
    stat = _stat(pid)
    # Gone, a zombie (its trial is over), or the pid now names another process.
    return stat is not None and stat[0] != "Z" and stat[1] == ticks


def running(root: Path | None = None) -> list[TrialProcess]:
    """The live trial processes on this machine whose launchers used temp dirs under `root`
    (default: the temp dir, as the launchers' own `tempfile` finds it)."""
    base = Path(root or tempfile.gettempdir())
    out = []
    paths = [*base.glob(f"{DIR_GLOB}/{NAME}"), *base.glob(f"{RANKS_DIR_GLOB}/rank*.pid")]
    for path in paths:
        try:
            pid_text, ticks_text = path.read_text().split()
            config = json.loads((path.parent / "config.json").read_text())
            rank = None if path.name == NAME else int(path.stem.removeprefix("rank"))
        except (OSError, ValueError):
            continue  # the trial ended and its dir is being removed
        pid, ticks = int(pid_text), int(ticks_text)
        if _alive(pid, ticks):
            number = config.get("trial_number")
            out.append(TrialProcess(pid, config.get("study_id"), number, path.parent, rank))
    return out
