"""Where a 10,000-trial study's reads spend their time, without HTTP: the trial page and the end
of study, called directly (issue 16; `bench/reads_scale.py` measures them through the service).

Seeds one study of 10,000 trials on a fresh PostgreSQL database (bench/reads_lib/seed.py),
vacuums and analyzes it (as autovacuum would), then prints:

- the trial page (`trial_reads.trial_page_json`, a page of 500 at a random `after`, then gzip
  level 1 as the service sends it): p50/p95/p99 over `--repeats` calls, and its phases (the
  read transaction, the row fetch, the views, the encoding, gzip) by median;
- the end of study, as `StudyLease.finish` computes it (rows, recommendation, knob report, the
  policy's evidence): each phase's best of `--runs`, wall and CPU, garbage collector paused;
- with `--profile`, cProfile's top functions for both (cumulative).

    python bench/profile_reads.py [--pg postgresql+psycopg://postgres@127.0.0.1:5432] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import itertools
import pstats
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from autotuner.options import StudyOptions
from autotuner.search.objective import Objective
from autotuner.storage.session import Database, dispose_engines, upgrade_database
from autotuner.storage.trial_list import list_rows
from autotuner.study import trial_list, trial_reads
from autotuner.study.gc_pause import gc_paused
from autotuner.study.live import end_of_study_rows
from autotuner.study.recommend import knob_importance, recommend_ranked
from bench.reads_lib.seed import seed_study
from bench.reads_lib.service import _percentiles, _policy, vacuum_analyze

PAGE = 500


def trial_page(db: Database, study_id: str, repeats: int, rng: random.Random) -> dict[str, Any]:
    """The page's latency (what the API route runs, plus gzip) and its phases."""
    total, phases = [], []
    for i in range(repeats + 5):  # 5 to warm: connections, query plans
        after = rng.randrange(-1, 10_000 - PAGE)
        t0 = time.perf_counter()
        with db.read() as s:
            ref, options = trial_reads._study_options(s, study_id)
            t1 = time.perf_counter()
            rows = list_rows(s, ref, after=after, limit=PAGE)
        t2 = time.perf_counter()
        views = trial_list.views(rows, options)
        t3 = time.perf_counter()
        body = orjson.dumps(views)
        t4 = time.perf_counter()
        gzip.compress(body, 1)
        t5 = time.perf_counter()
        if i >= 5:
            total.append((t5 - t0) * 1000)
            phases.append(
                [(b - a) * 1000 for a, b in ((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5))]
            )
    names = ("transaction + study", "rows", "views", "orjson", "gzip")
    return {
        "ms": {k: round(v, 1) for k, v in _percentiles(total).items()},
        "phases_p50_ms": {
            n: round(statistics.median(p[i] for p in phases), 2) for i, n in enumerate(names)
        },
        "bytes": len(body),
    }


def end_of_study(db: Database, study_id: str, runs: int) -> dict[str, Any]:
    """The end of study's phases, best of `runs` (nothing is written: it can run again)."""
    policy = _policy(db, study_id)
    best: dict[str, float] = {}
    for _ in range(runs):
        cpu, marks = time.process_time(), [time.perf_counter()]
        with gc_paused():
            with db.read() as s:
                trials = end_of_study_rows(s, study_id)
                marks.append(time.perf_counter())
                rec, ranked = recommend_ranked(
                    trials, Objective.TOKENS_PER_S, options=StudyOptions()
                )
            marks.append(time.perf_counter())
            assert rec is not None
            knob_importance(ranked, rec.noise_rel)
            marks.append(time.perf_counter())
            policy.report(trials)
            marks.append(time.perf_counter())
        spans = [b - a for a, b in itertools.pairwise(marks)]
        got = dict(zip(("rows", "recommend", "knob report", "evidence"), spans, strict=True))
        got["total"], got["cpu"] = marks[-1] - marks[0], time.process_time() - cpu
        best = {k: min(v, best.get(k, v)) for k, v in got.items()}
    return {k: round(v * 1000) for k, v in best.items()}


def _profiled(what: Callable[[], Any], top: int = 25) -> None:
    profile = cProfile.Profile()
    profile.runcall(what)
    pstats.Stats(profile).sort_stats("cumulative").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432")
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions")
    args = parser.parse_args()
    name = f"autotuner_profile_{uuid.uuid4().hex[:10]}"
    admin = create_engine(make_url(args.pg).set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(args.pg).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade_database(url)
        db = Database(url)
        study_id = seed_study(db, trials=10_000, name="big", rng=random.Random(16), running=2)
        vacuum_analyze(url)
        rng = random.Random(1)
        print("trial page of 500:", trial_page(db, study_id, args.repeats, rng))
        print("end of study (best of runs, ms):", end_of_study(db, study_id, args.runs))
        if args.profile:
            _profiled(lambda: trial_page(db, study_id, args.repeats, rng))
            _profiled(lambda: end_of_study(db, study_id, 1))
    finally:
        dispose_engines()
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
