"""Reads over HTTP against the service: each read's latency, and 30 clients polling while a
writer finishes trials as a coordinator does."""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx

from autotuner.search.objective import Objective
from autotuner.storage.session import Database
from bench.reads_lib.seed import TrialWriter
from bench.reads_lib.service import OWNER, _quiet, rounded

# The targets at 50,000 trials, in ms (p99 unless said).
TARGETS_MS = {
    "api": 50.0,  # every API read
    "rejudge": 200.0,  # best?headroom=
    "page": 2_000.0,  # the dashboard's HTML pages (issue 16's target)
    "list": 200.0,  # the dashboard's study list (issue 16's target)
    "poll": 200.0,  # 30 polling clients while trials insert
    "end": 2_000.0,  # the end of a study
    "cli": 500.0,  # a CLI read, cold process
}
SECONDS_PER_READ = 30.0  # a read slower than this budget allows is measured fewer times


def _rejudge_headroom(rng: random.Random) -> str:
    # A fresh headroom each call: the answer is computed at that headroom. What no headroom
    # changes is kept per study version (study/recommend_cache.py): the warm-up calls build it.
    return f"{rng.uniform(0.02, 0.2):.4f}"


# Each HTTP read's target kind (TARGETS_MS), by name: what `--only` picks from.
READ_KINDS = {
    "GET /api/studies/{big}": "api",
    "GET /api/studies/{big}/trials?after=N&limit=500": "api",
    "GET /api/studies/{big}/trials (no limit: the default)": "api",
    "GET /api/studies/{big}/best": "api",
    "GET /api/studies/{big}/best?headroom=x (re-judge, a fresh x each call)": "rejudge",
    "GET /api/studies/{big}/export?format=json": "api",
    "GET /api/studies?limit=200 (201 studies)": "api",
    "dashboard GET / (200 studies)": "list",
    "dashboard GET /studies/{big} (HTML)": "page",
    "dashboard poll ?after=&charts_at= (nothing new)": "api",
}


def measure_http(
    base: str, big: str, repeats: int, rng: random.Random, *, only: set[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Each read's latency; `only`: the reads of those kinds alone (in the same order)."""
    client = httpx.Client(base_url=base, headers={"Accept-Encoding": "gzip"}, timeout=120)
    started = time.perf_counter()
    page = client.get(f"/studies/{big}?format=json").json()
    # The service's first read of the study's page computes what later ones are served from
    # (its kept charts: dashboard/charts_kept.py): reported beside the page's row. Every read
    # below comes after it, the lists too: what the service keeps for a study viewed must not
    # cost the other reads (its objects, walked by each full collection, once did: 120 to 190 ms;
    # bench/list_after_page.py times those collections).
    first_ms = (time.perf_counter() - started) * 1000
    total, charts_at = page["study"]["trials_total"], page["charts_at"]
    running = min(t["number"] for t in page["trials"] if t["state"] == "running")
    top = max(total - 500, 0)
    reads: dict[str, tuple[str, Callable[[], str]]] = {
        "GET /api/studies/{big}": ("api", lambda: f"/api/studies/{big}"),
        "GET /api/studies/{big}/trials?after=N&limit=500": (
            "api",
            lambda: f"/api/studies/{big}/trials?after={rng.randrange(-1, top)}&limit=500",
        ),
        "GET /api/studies/{big}/trials (no limit: the default)": (
            "api",
            lambda: f"/api/studies/{big}/trials",
        ),
        "GET /api/studies/{big}/best": ("api", lambda: f"/api/studies/{big}/best"),
        "GET /api/studies/{big}/best?headroom=x (re-judge, a fresh x each call)": (
            "rejudge",
            lambda: f"/api/studies/{big}/best?headroom={_rejudge_headroom(rng)}",
        ),
        "GET /api/studies/{big}/export?format=json": (
            "api",
            lambda: f"/api/studies/{big}/export?format=json",
        ),
        "GET /api/studies?limit=200 (201 studies)": ("api", lambda: "/api/studies?limit=200"),
        "dashboard GET / (200 studies)": ("list", lambda: "/"),
        "dashboard GET /studies/{big} (HTML)": ("page", lambda: f"/studies/{big}"),
        "dashboard poll ?after=&charts_at= (nothing new)": (
            "api",
            lambda: f"/studies/{big}?format=json&after={running - 1}&charts_at={charts_at}",
        ),
    }
    assert {name: kind for name, (kind, _) in reads.items()} == READ_KINDS
    out = {}
    for name, (kind, path) in reads.items():
        if only is not None and kind not in only:
            continue
        print(f"  {name}", flush=True)
        for _ in range(2):  # warm: connections, caches, the first query plans
            client.get(path(), headers={"Accept": "text/html"}).raise_for_status()
        samples, sizes, raw = [], [], []
        spent = time.perf_counter()
        for _ in range(repeats):
            started = time.perf_counter()
            resp = client.get(path(), headers={"Accept": "text/html"})
            samples.append((time.perf_counter() - started) * 1000)
            resp.raise_for_status()
            sizes.append(int(resp.headers.get("content-length", len(resp.content))))
            raw.append(len(resp.content))
            if time.perf_counter() - spent > SECONDS_PER_READ and len(samples) >= 5:
                break
        out[name] = {
            "kind": kind,
            **rounded(samples),
            "bytes_gzip": int(statistics.median(sizes)),
            "bytes": int(statistics.median(raw)),
            "gzip": resp.headers.get("content-encoding") == "gzip",
            "first_ms": round(first_ms, 1) if kind == "page" else None,
        }
        if "no limit" in name:
            body = resp.json()
            out[name]["rows"] = len(body)
            out[name]["all_rows"] = len(body) >= total
            out[name]["next"] = resp.headers.get("link")
    return out


async def _poller(
    client: httpx.AsyncClient, path: str, stop: float, interval_s: float, out: list[float]
) -> None:
    await asyncio.sleep(random.uniform(0, interval_s))  # clients do not poll in step
    while time.perf_counter() < stop:
        started = time.perf_counter()
        resp = await client.get(path)
        out.append((time.perf_counter() - started) * 1000)
        resp.raise_for_status()
        await asyncio.sleep(max(0.0, interval_s - (time.perf_counter() - started)))


async def _poll(base: str, paths: list[str], seconds: float, interval_s: float) -> list[float]:
    samples: list[float] = []
    limits = httpx.Limits(max_connections=len(paths))
    async with httpx.AsyncClient(
        base_url=base, headers={"Accept-Encoding": "gzip"}, timeout=60, limits=limits
    ) as client:
        stop = time.perf_counter() + seconds
        await asyncio.gather(*(_poller(client, p, stop, interval_s, samples) for p in paths))
    return samples


def _write_trials(url: str, big: str, gap_s: float, stop: Any, steps: Any) -> None:
    """The writer: a coordinator's trial writes and live recommendation, in a process of its
    own as a coordinator is (in the clients' process its CPU would hold their GIL, and their
    latencies would count it)."""
    from autotuner.options import StudyOptions
    from autotuner.study.lifecycle import StudyLease

    db = Database(url)
    lease = StudyLease(db, big, OWNER, ttl_s=600, heartbeat_interval_s=5, on_event=_quiet)
    lease.take()
    lease.store_live_best(Objective.TOKENS_PER_S, StudyOptions())  # as at the study's start
    writer = TrialWriter(db, big, random.Random(7), lease.owner)
    while not stop.is_set():
        started = time.perf_counter()
        writer.finish_one()
        lease.store_live_best(Objective.TOKENS_PER_S, StudyOptions())
        took = time.perf_counter() - started
        steps.put(took * 1000)
        stop.wait(max(0.0, gap_s - took))


def measure_polling(
    base: str,
    url: str,
    big: str,
    *,
    clients: int = 30,
    seconds: float = 30.0,
    interval_s: float = 1.0,
    writer_gap_s: float = 0.5,
) -> dict[str, Any]:
    """`clients` clients polling every `interval_s` (half of them the study's best, half its
    view), while a writer process finishes a trial every `writer_gap_s` (or as fast as its
    steps allow) and stores the live recommendation after each, as the coordinator does."""
    context = multiprocessing.get_context("spawn")
    stop, steps = context.Event(), context.Queue()
    writer = context.Process(target=_write_trials, args=(url, big, writer_gap_s, stop, steps))
    writer.start()
    paths = [
        f"/api/studies/{big}/best" if i % 2 == 0 else f"/api/studies/{big}" for i in range(clients)
    ]
    try:
        samples = asyncio.run(_poll(base, paths, seconds, interval_s))
    finally:
        stop.set()
        writer.join(300)
    written = []
    while not steps.empty():
        written.append(steps.get())
    return {
        "clients": clients,
        "seconds": seconds,
        "interval_s": interval_s,
        "requests": len(samples),
        "ms": rounded(samples),
        "trials_written": len(written),
        "writer_step_ms": rounded(written) if written else None,
    }
