"""The 200-study list before and after a big study's page was viewed, in the service's process:
each list's latency, and the cyclic collector's full collections that fell in the lists.

Viewing a study's page keeps its charts in the service (dashboard/charts_kept.py: about 80 MiB
of objects at 50,000 trials). Objects the collector tracks and that are not frozen are walked by
every full collection, whatever request it falls in; the list's tail (p99) shows it. Over HTTP
(bench/reads_scale.py, where the lists are read after the page's first read) a full collection
falls in a few of 300 lists or none; here the collector's own callbacks time each one, so what
a kept study costs the other requests is seen whether or not one fell in the tail.

A fresh database on the server (bench/reads_lib/service.py), one study of `--trials` (+2
running) and 200 of 50, VACUUM ANALYZE; the service's app (create_app, no coordinator) run in
this process through its lifespan (it freezes what startup built, as `serve` does); then
`--lists` reads each of `GET /api/studies?limit=200` and the dashboard's `GET /`, alternating,
before the big study's page is viewed and after. Prints a Markdown table; writes nothing.

    python bench/list_after_page.py --trials 50000 [--lists 300] [--pg URL]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastapi.testclient import TestClient

from autotuner.api.app import ServiceSettings, create_app
from autotuner.storage.session import Database, dispose_engines
from bench.reads_lib.seed import seed_study
from bench.reads_lib.service import fresh_database, rounded, vacuum_analyze

READS = {"GET /api/studies?limit=200": "/api/studies?limit=200", "dashboard GET /": "/"}


class FullCollections:
    """The collector's full (generation 2) collections while installed: each one's ms."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.ms.append((time.perf_counter() - self._started) * 1000)


def lists(client: TestClient, n: int) -> dict[str, Any]:
    """`n` reads of each list, alternating: their latencies and the full collections then."""
    full = FullCollections()
    samples: dict[str, list[float]] = {name: [] for name in READS}
    gc.callbacks.append(full)
    try:
        for _ in range(n):
            for name, path in READS.items():
                started = time.perf_counter()
                client.get(path, headers={"Accept": "text/html"}).raise_for_status()
                samples[name].append((time.perf_counter() - started) * 1000)
    finally:
        gc.callbacks.remove(full)
    return {
        "reads": {name: _with_max(ms) for name, ms in samples.items()},
        "full_collections": len(full.ms),
        "full_collection_ms": _with_max(full.ms) if full.ms else None,
        "tracked_objects": len(gc.get_objects()),
        "frozen_objects": gc.get_freeze_count(),
    }


def _with_max(ms: list[float]) -> dict[str, float]:
    return {**rounded(ms), "max": round(max(ms), 1)}


def run(url: str, trials: int, n: int) -> dict[str, Any]:
    rng = random.Random(16)
    db = Database(url)
    big = seed_study(db, trials=trials, name="big", rng=rng, running=2)
    for i in range(200):
        seed_study(db, trials=50, name=f"small-{i}", rng=rng)
    vacuum_analyze(url)
    app = create_app(ServiceSettings(db_url=url, coordinator=False, migrate=False))
    with TestClient(app) as client:
        for path in READS.values():  # warm: connections, the summaries' cache, query plans
            client.get(path, headers={"Accept": "text/html"}).raise_for_status()
        before = lists(client, n)
        started = time.perf_counter()
        client.get(f"/studies/{big}?format=json").raise_for_status()
        page_ms = (time.perf_counter() - started) * 1000
        after = lists(client, n)
    return {"before": before, "page_ms": round(page_ms, 1), "after": after}


def table(result: dict[str, Any]) -> str:
    lines = [
        "| when | read | p50 ms | p95 ms | p99 ms | max ms | full collections (max ms) "
        "| tracked / frozen objects after |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for when in ("before", "after"):
        phase = result[when]
        full = phase["full_collection_ms"]
        collections = f"{phase['full_collections']}" + (f" ({full['max']})" if full else "")
        objects = f"{phase['tracked_objects']:,} / {phase['frozen_objects']:,}"
        for name, r in phase["reads"].items():
            lines.append(
                f"| {when} the big page | {name} | {r['p50']} | {r['p95']} | {r['p99']} "
                f"| {r['max']} | {collections} | {objects} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50000, help="the big study's trials")
    parser.add_argument("--lists", type=int, default=300, help="reads of each list per phase")
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432")
    args = parser.parse_args()
    load_before = os.getloadavg()
    try:
        with fresh_database(args.pg) as url:
            result = run(url, args.trials, args.lists)
    finally:
        dispose_engines()
    print(f"Command: `python bench/list_after_page.py {' '.join(sys.argv[1:])}`")
    load = " / ".join(" ".join(f"{x:.1f}" for x in avg) for avg in (load_before, os.getloadavg()))
    print(f"load average (1, 5, 15 min) before / after: {load}")
    print(f"the big study's page (its charts computed and kept): {result['page_ms']} ms\n")
    print(table(result))


if __name__ == "__main__":
    main()
