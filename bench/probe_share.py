"""What the attention probe costs a study, and what skipping it saved, from study databases.

Every trial records its build's parts (TrialResult.build_parts_s: checks, probe, model,
optimizer, data), so the probe's own seconds are in the database; no second study is needed to
see them. Since 2026-12-05 a trial skips the probe where its study already ran the kernel at
its dtype (MeasureSettings.attention_probe). Give a study that probed every trial first (the
baseline) and then studies with the skip:

    python bench/probe_share.py \\
        bench/results/h200_session_20261204d/tune-gpt2-eager-wide-after.db \\
        bench/results/h200_session_20261206/tune-gpt2-eager-wide-probe-once.db

For each study: the probes run, their seconds and share of the study's wall, the first probe of
each kernel and dtype apart from the later ones (a first use of cuDNN's attention costs 1-2 s;
later ones about 0.17 s), and the trials that skipped it. The saving is estimated as the skipped
trials x the baseline's median later probe of their kernel.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sqlite3
import statistics
from pathlib import Path
from typing import Any

MEASURED = ("expert-default", "seed", "search", "remeasure", "headroom")


def study_probes(db: Path) -> dict[str, Any]:
    """The probe seconds of one study's trials, first and later per kernel and dtype."""
    with sqlite3.connect(db) as conn:
        started, finished = conn.execute(
            "SELECT started_at, finished_at FROM studies ORDER BY created_at LIMIT 1"
        ).fetchone()
        marks = ",".join("?" * len(MEASURED))
        rows = conn.execute(
            "SELECT config, result FROM trials WHERE state = 'complete' "
            f"AND purpose IN ({marks}) ORDER BY number",
            MEASURED,
        ).fetchall()
    span = dt.datetime.fromisoformat(finished) - dt.datetime.fromisoformat(started)
    wall = span.total_seconds()
    seen: set[tuple[str, str]] = set()
    first: dict[str, list[float]] = {}
    later: dict[str, list[float]] = {}
    skipped: dict[str, int] = {}
    for config, result in rows:
        cfg, res = json.loads(config), json.loads(result or "{}") or {}
        kernel, dtype = cfg["knobs"].get("attention", "?"), cfg["knobs"].get("precision", "?")
        if cfg.get("measure", {}).get("attention_probe", True) is False:
            skipped[kernel] = skipped.get(kernel, 0) + 1
            continue
        probe = (res.get("build_parts_s") or {}).get("probe")
        if probe is None:
            continue
        (later if (kernel, dtype) in seen else first).setdefault(kernel, []).append(probe)
        seen.add((kernel, dtype))
    total = sum(map(sum, first.values())) + sum(map(sum, later.values()))
    return {
        "db": str(db),
        "wall_s": wall,
        "trials": len(rows),
        "probes": sum(map(len, first.values())) + sum(map(len, later.values())),
        "probe_s": round(total, 2),
        "first_s": {k: [round(x, 3) for x in v] for k, v in first.items()},
        "later_median_s": {k: round(statistics.median(v), 3) for k, v in later.items()},
        "skipped": skipped,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("baseline", type=Path, help="a study that probed every trial (SQLite)")
    ap.add_argument("dbs", nargs="+", type=Path, help="studies with the probe skip")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    base = study_probes(args.baseline)
    rows = [base] + [study_probes(db) for db in args.dbs]
    print("| study | trials | wall s | probes | probe s | share | skipped | saved (est.) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        saved = sum(n * base["later_median_s"].get(k, 0.0) for k, n in r["skipped"].items())
        r["saved_est_s"] = round(saved, 2)
        print(
            f"| {Path(r['db']).parent.name}/{Path(r['db']).stem} | {r['trials']} | "
            f"{r['wall_s']:.0f} | {r['probes']} | {r['probe_s']:.2f} | "
            f"{r['probe_s'] / r['wall_s']:.1%} | {sum(r['skipped'].values())} | "
            f"{saved:.2f} s ({saved / r['wall_s']:.1%}) |"
        )
    for r in rows:
        print(
            f"\n{Path(r['db']).parent.name}: first probe per kernel and dtype {r['first_s']}; "
            f"later probes' median {r['later_median_s']}; skipped {r['skipped']}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
