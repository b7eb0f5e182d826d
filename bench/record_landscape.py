"""Record a replay landscape on this machine's GPUs, one session at a time (issue 10).

A landscape (docs/landscape-format.md) is what `bench/replay.py` searches: the more configs it
holds, the more a search's efficiency can be told apart from luck (the Llama landscapes of
2026-12-01 held 4-8 configs per global batch, where random search needs two trials).

Each run adds one `autotuner tune` study to the recording's SQLite database, over the space's
grid in an order of its own (Optuna's GridSampler seeded by the number of studies already
recorded, so a later session measures configs an earlier one did not), proposing nothing but
the grid: no expert or neighbour seeds, no guided proposals, no re-measurement, no end checks
(headroom_check and numerics_check off), no early stop. The rules and the cost model still
prune what cannot run or fit, at no GPU time, and with the tune's memory headroom (`--headroom`,
10% as a tune keeps by default) what the cost model is sure would break it: such a config can
never be the landscape's best inside the headroom, which is what a tune is judged against (on
the H100 Qwen2.5-1.5B recording, three such configs took 291 of a session's 481 s to run out of
memory).
Every trial runs the held global batch. On a machine with several GPUs, Ray runs one trial per
free GPU at a time.

    python bench/record_landscape.py llama-1b --global-batch 32768 --minutes 9 \
        --db bench/results/landscape_recording/llama-1b.db

Then the landscape, from the recording and the model's other committed trials:

    python bench/assemble_landscape.py --model llama-1b \
        --out bench/results/landscape_llama_1b_h200.json \
        bench/results/landscape_recording/llama-1b.db ...

On the lent H200s: `bench/record_landscape_h200.sh` (brings the committed recording in and out).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from autotuner.option_defaults import DEFAULT_HEADROOM

ROOT = Path(__file__).resolve().parent.parent
SPACE = ROOT / "bench/spaces/llama-landscape.yaml"
# Every option that would spend a trial on anything but the next grid point.
GRID_ONLY = {
    "expert_seed": "false",
    "neighbour_seeds": "false",
    "history_seeds": "0",
    "guided": "false",
    "remeasure_top": "0",
    "early_stop_patience": "0",
    "numerics_check": "false",
    "headroom_check": "false",  # the headroom only screens: no recommendation is used
    "stop_slow_trials": "false",  # every config measured in full: the replay answers with it
}


def studies_recorded(db: Path) -> int:
    """How many studies the recording holds (0 for a new one)."""
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'studies'").fetchone():
            return 0
        return int(conn.execute("SELECT count(*) FROM studies").fetchone()[0])


def configs_run(db: Path) -> list[dict[str, Any]]:
    """The params of every trial the recording's earlier sessions ran (measured or failed:
    either is a landscape entry), each once; not a compile budget the session's time cut
    short (`truncated_compile_budget`): a later session runs that config again."""
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'trials'").fetchone():
            return []
        rows = conn.execute(
            "SELECT t.params, t.config, t.result, s.space FROM trials t "
            "JOIN studies s ON s.id = t.study_id "
            "WHERE t.state IN ('complete', 'infeasible', 'failed')"
        ).fetchall()
    unique = set()
    for params, config, result, space in rows:
        measure = (json.loads(config or "{}")).get("measure") or {}
        if truncated_compile_budget(json.loads(result or "{}"), measure, json.loads(space)):
            continue
        unique.add(json.dumps(json.loads(params), sort_keys=True))
    return [json.loads(p) for p in sorted(unique)]


def truncated_compile_budget(
    result: dict[str, Any], measure: dict[str, Any], space: dict[str, Any]
) -> str | None:
    """Why a compile-budget failure measured the session, not the config: the budget it ran
    under (the coordinator lowers it to the study's time left) was shorter than its space's
    (none: no limit). None for any other result (a trial's result, config["measure"] and its
    study's space, as stored). A 3-minute recording session stopped a Llama 1B max-autotune
    trial at 180 s where its space allows 300 (2026-12-04)."""
    message = result.get("error_message") or ""
    if result.get("failure_class") != "compile_error" or not message.startswith("compile budget"):
        return None
    ran = measure.get("compile_budget_s")
    declared = (space.get("measure") or {}).get("compile_budget_s")
    if ran is None or (declared is not None and ran >= declared):
        return None
    limit = f"the space's {declared:.0f} s" if declared is not None else "no limit in the space"
    return f"compile budget cut to the study's time left ({ran:.0f} s; {limit})"


def session_space(space: Path, earlier: list[dict[str, Any]], out_dir: Path) -> Path:
    """The space of this session: `space` plus one rule per config an earlier session ran,
    which the rules screen prunes at no GPU time. Each session's grid order is its own
    (GridSampler seeded by the session's number), so without these a session would measure
    again some of what the recording holds (~1 of 12 a session on Llama 1B)."""
    if not earlier:
        return space
    builtin = ROOT / "search_spaces" / f"{space}.yaml"  # a built-in space by name (cpu-demo)
    doc = yaml.safe_load((space if space.exists() else builtin).read_text())
    knobs = list(doc["knobs"])
    rules = doc.setdefault("rules", [])
    for params in earlier:
        if not all(k in params for k in knobs):
            continue  # recorded with another space: not one of this grid's points
        rules.append(
            {
                "if": {k: [params[k]] for k in knobs},
                "then": {knobs[0]: []},  # nothing satisfies it: the config is pruned
                "why": "recorded by an earlier session of this landscape",
            }
        )
    out = out_dir / f"{space.stem}-session.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def tune_command(args: argparse.Namespace, seed: int) -> list[str]:
    """The `autotuner tune` that records one session."""
    name = Path(args.model).stem
    command = [
        sys.executable, "-m", "autotuner.cli", "tune", args.model,
        "--space", args.space, "--sampler", "grid", "--seed", str(seed),
        "--headroom", str(args.headroom), "--name", f"landscape-{name}-{seed}",
        "--db", f"sqlite:///{args.db.resolve()}",
    ]  # fmt: skip
    for key, value in GRID_ONLY.items():
        command += ["--option", f"{key}={value}"]
    for flag, value in (
        ("--global-batch", args.global_batch),
        ("--minutes", args.minutes),
        ("--trials", args.trials),
    ):
        if value is not None:
            command += [flag, str(value)]
    return command


def summary(db: Path) -> str:
    """What the recording holds: each study's trials by state, and the distinct configs
    measured over all of them."""
    with sqlite3.connect(db) as conn:
        studies = conn.execute("SELECT id, name FROM studies ORDER BY created_at").fetchall()
        rows = conn.execute("SELECT study_id, state, params FROM trials").fetchall()
    lines = []
    for study_id, name in studies:
        states = Counter(state for sid, state, _ in rows if sid == study_id)
        counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
        lines.append(f"  {study_id} {name}: {counts or 'no trials'}")

    def configs(*states: str) -> set[str]:
        return {json.dumps(json.loads(p), sort_keys=True) for _, st, p in rows if st in states}

    measured, failed = configs("complete"), configs("infeasible", "failed")
    sessions = f"{len(studies)} session{'s' if len(studies) != 1 else ''}"
    lines.append(
        f"{db}: {sessions}, {len(measured | failed)} distinct configs run "
        f"({len(measured)} measured, {len(failed - measured)} only failed)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="model preset (llama-1b) or a model spec file")
    ap.add_argument("--db", type=Path, required=True, help="the recording (SQLite file)")
    ap.add_argument("--space", default=str(SPACE), help="search space (default: %(default)s)")
    ap.add_argument("--global-batch", type=int, help="tokens per optimizer step, held")
    ap.add_argument("--minutes", type=float, help="this session's time")
    ap.add_argument("--trials", type=int, help="this session's trials")
    ap.add_argument(
        "--headroom",
        type=float,
        default=DEFAULT_HEADROOM,
        help="the share of GPU memory a tune keeps free: configs the cost model is sure would "
        "break it are not run (0: only those sure to run out of memory; default: %(default)s)",
    )
    args = ap.parse_args(argv)
    if args.minutes is None and args.trials is None:
        ap.error("give this session a budget: --minutes, --trials or both")
    seed = studies_recorded(args.db)
    print(f"recording session {seed + 1} into {args.db} (grid order seed {seed})", flush=True)
    earlier = configs_run(args.db)
    with tempfile.TemporaryDirectory() as tmp:
        args.space = str(session_space(Path(args.space), earlier, Path(tmp)))
        if earlier:
            print(f"{len(earlier)} config(s) recorded before: pruned, not measured again")
        code = subprocess.run(tune_command(args, seed), cwd=ROOT).returncode
    if args.db.exists():
        print(summary(args.db))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
