"""A CPU trial runs under a memory cap by default (workers/memory.py): what it allocates past a
share of the machine's available memory fails in the trial, as `oom`, rather than the kernel's
OOM-killer taking a process of the machine.

The allocations here are reserved, never touched (torch.empty: no page is written), so the test
asks the kernel for twice the machine's memory without using any of it: under the cap the
request is refused; without one every piece would be granted, lazily."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import json, torch
from workers import memory
from workers.failures import classify

notes = []
limit = memory.apply_cap(torch.device("cpu"), None, notes)
total = memory._meminfo_bytes("MemTotal")
held, step, out = [], 1 << 30, {"limit": limit, "notes": notes}
try:
    while len(held) * step < 2 * total:
        held.append(torch.empty(step, dtype=torch.uint8))
    out["refused_at_gib"] = None
except Exception as exc:
    failure, message, _ = classify(exc)
    out.update(refused_at_gib=len(held), failure=str(failure), message=message[:200])
print(json.dumps(out))
"""


def test_a_cpu_trial_without_a_limit_cannot_allocate_past_the_default_cap() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    from workers.memory import DEFAULT_CPU_SHARE, GIB, _meminfo_bytes

    available = (_meminfo_bytes("MemAvailable") or 0) / GIB
    assert out["refused_at_gib"] is not None, "twice the machine's memory was granted: no cap"
    # Refused near the default share of what was available (the pieces are 1 GiB each).
    assert out["refused_at_gib"] <= DEFAULT_CPU_SHARE * available + 1, out
    assert out["failure"] == "oom", out
    # Not the limit the trial is judged against (a CPU peak is reported, never judged).
    assert out["limit"] is None
    assert any("CPU memory cap" in note for note in out["notes"]), out
