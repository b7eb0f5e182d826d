"""Reads at scale (issues 16 and 42): one study of N trials (each N of `--trials`) beside 200
studies of 50, on PostgreSQL, against the issue's targets.

For each N: a fresh database on the server (default postgresql+psycopg://postgres@127.0.0.1:5432),
migrated and seeded (bench/reads_lib/seed.py: the rows the coordinator writes, bulk-inserted, and
each study's live recommendation stored as the coordinator stores it), VACUUM ANALYZE (as
autovacuum would), then the real service (`autotuner serve --no-coordinator`, a subprocess):

- each read's p50/p95/p99 over `--repeats` calls, over HTTP with gzip: the study view, trial
  pages of 500, `trials` with no limit (the default), best, the re-judge (`best?headroom=`, a
  fresh headroom each call), export, the 200-study list, the dashboard's pages and its poll;
- the study page in headless Chromium, where Chromium is installed;
- the CLI's reads (`best`, `status`, `trials`), each a cold process: against the service,
  the PostgreSQL database (`--db`) and an embedded SQLite file seeded with the same big study;
- 30 clients polling (best and the study view, every second) while a writer finishes a trial
  every 0.5 s and stores the live recommendation after each, as the coordinator does;
- the coordinator's steps: the live recommendation stored after each of 20 finished trials,
  and the end of the study (recommendation, knob report, the policy's evidence, stored).

Writes bench/results/reads_scale_cpu.{json,md}; each database is dropped at the end.

    python bench/reads_scale.py --trials 10000,50000 [--pg URL] [--repeats 100]

`--only rejudge` (or other read kinds, comma-separated: `rejudge,api` re-judges before the other
API reads, as the full run does) seeds the big study, measures only those HTTP reads and prints
their rows (with `--small 0`: no small studies), writing nothing; `--only cli`, the CLI's reads
alone; `--only page` times the study page in Chromium too; `--only end`, only the end of the
study (the coordinator's step, no service); `--only live`, only the live recommendation stored
after each of 20 finished trials (the coordinator's step, no service).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotuner.storage.session import Database, dispose_engines, upgrade_database
from bench.reads_lib.browser import measure_browser
from bench.reads_lib.cli_reads import measure_cli
from bench.reads_lib.http_reads import READ_KINDS, measure_http, measure_polling
from bench.reads_lib.report import only_rows, report
from bench.reads_lib.seed import seed_study
from bench.reads_lib.service import (
    ROOT,
    fresh_database,
    running_service,
    server_facts,
    vacuum_analyze,
)
from bench.reads_lib.steps import measure_end_of_study, measure_live_best


def seed(url: str, trials: int, rng: random.Random, small: int) -> dict[str, Any]:
    db = Database(url)
    started = time.perf_counter()
    big = seed_study(db, trials=trials, name="big", rng=rng, running=2)
    big_s = time.perf_counter() - started
    started = time.perf_counter()
    for i in range(small):
        seed_study(db, trials=50, name=f"small-{i}", rng=rng)
    return {
        "big": big,
        "small": small,
        "seed_big_s": round(big_s, 1),
        "seed_small_s": round(time.perf_counter() - started, 1),
    }


def seed_sqlite(folder: str, trials: int) -> tuple[str, str]:
    """The embedded database the CLI opens without --server: a SQLite file with the same
    big study (the rows of the same seed)."""
    url = f"sqlite:///{folder}/autotuner.db"
    upgrade_database(url)
    study = seed_study(Database(url), trials=trials, name="big", rng=random.Random(16))
    return url, study


def cli_reads(url: str, base: str, seeded: dict[str, Any]) -> dict[str, Any]:
    """The CLI's reads, 5 cold processes each: against the service at `base`, the database at
    `url`, and an embedded SQLite file seeded here with the same big study."""
    trials, big = seeded["big_trials"], seeded["big"]
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        sqlite_url, sqlite_big = seed_sqlite(folder, trials)
        seeded["seed_sqlite_s"] = round(time.perf_counter() - started, 1)
        cli = measure_cli(big, {"server": ["--server", base], "postgres": ["--db", url]}, 5)
        cli.update(measure_cli(sqlite_big, {"embedded SQLite": ["--db", sqlite_url]}, 5))
    return cli


def run_one(args: argparse.Namespace, trials: int) -> dict[str, Any]:
    rng = random.Random(16)
    with fresh_database(args.pg, keep=args.keep) as url:
        print(f"[{trials}] seeding ...", flush=True)
        seeded = seed(url, trials, rng, args.small)
        seeded["big_trials"] = trials
        seeded["vacuum_analyze_s"] = vacuum_analyze(url)
        big = seeded["big"]
        if args.only == {"end"}:  # the coordinator's step alone: no service
            print(f"[{trials}] the end of the study ...", flush=True)
            return {"trials": trials, "seed": seeded, "coordinator": measure_end_of_study(url, big)}
        if args.only == {"live"}:  # the coordinator's step after each finished trial alone
            print(f"[{trials}] the live recommendation ...", flush=True)
            live = measure_live_best(url, big, 20)
            return {"trials": trials, "seed": seeded, "coordinator": live}
        with running_service(url) as base:
            print(f"[{trials}] reads over HTTP ...", flush=True)
            if args.only == {"cli"}:
                return {
                    "trials": trials,
                    "seed": seeded,
                    "http": {},
                    "cli": cli_reads(url, base, seeded),
                }
            http = measure_http(base, big, args.repeats, rng, only=args.only)
            if args.only == {"page"}:  # and the page in Chromium, where it is installed
                browser = measure_browser(base, big, args.browser_runs)
                return {"trials": trials, "seed": seeded, "http": http, "browser": browser}
            if args.only:
                return {"trials": trials, "seed": seeded, "http": http}
            print(f"[{trials}] the page in Chromium ...", flush=True)
            browser = measure_browser(base, big, args.browser_runs)
            print(f"[{trials}] the CLI ...", flush=True)
            cli = cli_reads(url, base, seeded)
            print(f"[{trials}] 30 clients polling while trials insert ...", flush=True)
            polling = measure_polling(base, url, big, seconds=args.poll_seconds)
        print(f"[{trials}] the coordinator's steps ...", flush=True)
        steps = measure_live_best(url, big, 20)
        steps.update(measure_end_of_study(url, big))
    return {
        "trials": trials,
        "seed": seeded,
        "http": http,
        "browser": browser,
        "cli": cli,
        "polling": polling,
        "coordinator": steps,
    }


def _kinds(value: str) -> set[str]:
    kinds = {k.strip() for k in value.split(",") if k.strip()}
    known = {*READ_KINDS.values(), "cli", "end", "live"}
    alone = kinds & {"cli", "end", "live"}
    if not kinds or not kinds <= known or (alone and len(kinds) > 1):
        raise argparse.ArgumentTypeError(
            f"{value!r}: read kinds of {', '.join(sorted(known))}, comma-separated (cli, end and "
            "live alone)"
        )
    return kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", default="10000,50000", help="big study sizes, comma-separated")
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432")
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--small", type=int, default=200, help="studies of 50 beside the big one")
    parser.add_argument("--poll-seconds", type=float, default=30.0)
    parser.add_argument("--browser-runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--name", default="reads_scale_cpu", help="the results' file name")
    parser.add_argument("--keep", action="store_true", help="keep the databases (URLs printed)")
    parser.add_argument(
        "--only",
        type=_kinds,
        help="only the HTTP reads of these kinds, comma-separated (rejudge: best?headroom=; "
        f"of {', '.join(sorted(set(READ_KINDS.values())))}), or the CLI's reads (cli), or the "
        "end of the study (end), or the live recommendation after a finished trial (live), "
        "printed, nothing written",
    )
    args = parser.parse_args()

    results: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}",
        **server_facts(args.pg),
        "repeats": args.repeats,
        "command": "python bench/reads_scale.py " + " ".join(sys.argv[1:]),
        "runs": [],
    }
    try:
        for n in (int(x) for x in args.trials.split(",")):
            load_before = os.getloadavg()  # other work on this shared machine shows in them
            run = run_one(args, n)
            run["load_before"], run["load_after"] = load_before, os.getloadavg()
            results["runs"].append(run)
    finally:
        dispose_engines()
    if args.only:
        print(only_rows(results))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(results, indent=2) + "\n")
    md = report(results)
    (args.out / f"{args.name}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
