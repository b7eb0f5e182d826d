"""Where a study's wall time went, from its database: measurement, compile, per-trial overhead
(process start, imports, CUDA set-up, model build, warm-up, exit) and the coordinator's own
time between trials (issue 10, item 6: the overhead under 25% of a study's wall time).

Every trial records its phases (workers/phases.py: start, imports, setup, build, first_step,
warmup, measure, checks, exit). The first step of a compiled trial is its compile (and one
step); of an eager trial it is overhead like the rest. A study's wall is its finished_at -
started_at; what the trials' walls do not cover (one GPU: trials run one after another) is the
coordinator's: Ray's start, launching, recording, the end-of-study report.

    python bench/study_overhead.py bench/results/h200_session_20261203/tune-gpt2-failures.db ...
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sqlite3
from pathlib import Path
from typing import Any

# Warm-up is the measurement protocol's (steps until the step time settles: docs/measurement.md),
# counted apart; the rest is what a faster worker could cut.
OVERHEAD_PHASES = ("start", "imports", "setup", "build", "checks", "exit")
# The headroom check's evaluation pass and checkpoint save: an end check's purpose, apart too.
CHECK_PHASES = ("eval", "checkpoint")


def _time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value)


def study_shares(db: Path) -> list[dict[str, Any]]:
    """One row per study in `db`: its wall and the seconds of each kind."""
    out = []
    with sqlite3.connect(db) as conn:
        studies = conn.execute(
            "SELECT id, name, started_at, finished_at FROM studies ORDER BY created_at"
        ).fetchall()
        for study_id, name, started, finished in studies:
            if not (started and finished):
                continue
            wall = (_time(finished) - _time(started)).total_seconds()
            rows = conn.execute(
                "SELECT config, result, wall_s FROM trials"
                " WHERE study_id = ? AND state != 'pruned'",
                (study_id,),
            ).fetchall()
            seconds = dict.fromkeys(
                ("measure", "warmup", "compile", "end_checks", "trial_overhead", "trials"), 0.0
            )
            phased = 0
            for config, result, trial_wall in rows:
                phases = (json.loads(result or "{}") or {}).get("phases_s") or {}
                seconds["trials"] += trial_wall or 0.0
                if not phases:
                    continue
                phased += 1
                compiled = json.loads(config)["knobs"].get("compile_mode", "none") != "none"
                seconds["measure"] += phases.get("measure", 0.0)
                seconds["warmup"] += phases.get("warmup", 0.0)
                seconds["end_checks"] += sum(phases.get(p, 0.0) for p in CHECK_PHASES)
                first = phases.get("first_step", 0.0)
                seconds["compile" if compiled else "trial_overhead"] += first
                seconds["trial_overhead"] += sum(phases.get(p, 0.0) for p in OVERHEAD_PHASES)
                # What the launcher waited beyond the worker's own phases (the process's start
                # before its clock, teardown after it) is per-trial overhead too.
                seconds["trial_overhead"] += max(0.0, (trial_wall or 0.0) - sum(phases.values()))
            out.append(
                {
                    "db": str(db),
                    "study": study_id,
                    "name": name,
                    "wall_s": round(wall, 1),
                    "trials_run": len(rows),
                    "trials_with_phases": phased,
                    "measure_s": round(seconds["measure"], 1),
                    "warmup_s": round(seconds["warmup"], 1),
                    "end_checks_s": round(seconds["end_checks"], 1),
                    "compile_s": round(seconds["compile"], 1),
                    "trial_overhead_s": round(seconds["trial_overhead"], 1),
                    "coordinator_s": round(max(0.0, wall - seconds["trials"]), 1),
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dbs", nargs="+", type=Path, help="study databases (SQLite)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    rows = [row for db in args.dbs for row in study_shares(db)]
    print(
        "| study | trials | wall s | measure | warm-up | compile | eval + ckpt | other per-trial"
        " | coordinator |"
        " overhead share | with warm-up |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        wall = r["wall_s"] or 1.0
        share = (r["trial_overhead_s"] + r["coordinator_s"]) / wall
        with_warmup = share + r["warmup_s"] / wall

        def pct(key: str, r: dict[str, Any] = r, wall: float = wall) -> str:
            return f"{r[key]:.0f} ({r[key] / wall:.0%})"

        print(
            f"| {Path(r['db']).parent.name}/{r['name']} | {r['trials_run']} | {wall:.0f} | "
            f"{pct('measure_s')} | {pct('warmup_s')} | {pct('compile_s')} | "
            f"{pct('end_checks_s')} | "
            f"{pct('trial_overhead_s')} | {pct('coordinator_s')} | **{share:.0%}** | "
            f"{with_warmup:.0%} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
