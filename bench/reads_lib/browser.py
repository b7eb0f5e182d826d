"""The study page in headless Chromium: navigation start to every part drawn (the page reports
it), and the whole browser run. Skipped where no Chromium is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from typing import Any

from bench.reads_lib.service import _percentiles


def measure_browser(base: str, big: str, runs: int) -> dict[str, Any]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return {"skipped": "chromium is not installed"}
    ready, wall = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as profile:
            started = time.perf_counter()
            proc = subprocess.run(
                [
                    chromium,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    f"--user-data-dir={profile}",
                    "--dump-dom",
                    f"{base}/studies/{big}",
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            wall.append((time.perf_counter() - started) * 1000)
        match = re.search(r'data-ready-ms="(\d+)"', proc.stdout)
        charts = re.search(r'data-charts="(\d+)"', proc.stdout)
        if not match or not charts:
            return {"error": "the page did not report itself drawn", "stderr": proc.stderr[-1000:]}
        ready.append(float(match.group(1)))
    return {
        "ready_ms": _percentiles(ready),
        "browser_run_ms": _percentiles(wall),
        "charts": int(charts.group(1)),
        "rows_in_table": proc.stdout.count("data-number="),
    }
