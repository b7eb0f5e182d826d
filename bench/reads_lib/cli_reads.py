"""The CLI's reads as a user runs them: a fresh `python -m autotuner.cli` process per call
(cold: the interpreter, the imports, the connection, the answer drawn), its wall time."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from bench.reads_lib.service import ROOT, cli_env, rounded


def _argv(verb: str, study: str) -> list[str]:
    return {
        "best": ["best", study],
        "status": ["status", study],
        "trials": ["trials", study],
        "status (list of 50)": ["status"],
    }[verb]


def measure_cli(study: str, where: dict[str, list[str]], runs: int) -> dict[str, Any]:
    """Each of `best`, `status`, `trials`, `status` of the newest studies against each
    backend in `where` (its flags:
    `--server URL`, `--db URL`), `runs` cold processes each: wall times in ms. The output
    goes to a pipe, as in a script (Rich draws the same tables, without colour)."""
    out: dict[str, Any] = {}
    for backend, flags in where.items():
        for verb in ("best", "status", "trials", "status (list of 50)"):
            argv = [sys.executable, "-m", "autotuner.cli", *_argv(verb, study), *flags]
            walls = []
            subprocess.run(argv, env=cli_env(), cwd=ROOT, capture_output=True, timeout=300)
            for _ in range(runs):  # each a new process; the one above wrote the bytecode
                started = time.perf_counter()
                proc = subprocess.run(
                    argv, env=cli_env(), cwd=ROOT, capture_output=True, text=True, timeout=300
                )
                walls.append((time.perf_counter() - started) * 1000)
                if proc.returncode != 0:
                    raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr[-1500:]}")
            out[f"autotuner {verb} ({backend})"] = {
                **rounded(walls),
                "stdout_lines": proc.stdout.count("\n"),
            }
    return out


def import_time(verb: str, study: str, flags: list[str]) -> str:
    """`python -X importtime` of one call: the ten slowest cumulative imports (for notes)."""
    argv = [sys.executable, "-X", "importtime", "-m", "autotuner.cli", *_argv(verb, study)]
    proc = subprocess.run(
        [*argv, *flags], env=cli_env(), cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    rows = []
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    rows.sort(reverse=True)
    return "\n".join(f"{us / 1000:8.1f} ms {name}" for us, name in rows[:10])
