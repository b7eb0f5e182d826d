"""Search efficiency: replay a recorded landscape through the real coordinator.

For each strategy and seed, a fresh SQLite database (migrated by the real migrations), the real
`StudyRunner` and a `ReplayExecutor` answering each trial with its recorded result. Reported per
strategy, over the seeds: trials and simulated GPU-seconds (each answered trial's recorded
wall_s; pruned proposals cost nothing) until the best config found is within 2% of the
landscape's best, as median and p90; OOM trials launched; trials launched that the rules call
impossible; predicted-OOM precision and recall against the recorded results.

Strategies: `ours` (TPE + rules + cost model + seeding + early stop + re-measurement),
`ours-noseed` (the same without the expert and history seeds: what the guards and TPE do on
their own), `tpe` (Optuna's TPE alone), `random`, `grid`; the last three launch whatever their
sampler proposes.

A recorded landscape need not be a full grid (bench/gpu_validation.py records sweeps around a
base config). Its configs are then the universe every strategy searches: each proposal, the
seeds included, becomes the nearest recorded config not yet measured (`UniverseSampler`,
`Snapper`: categorical knobs count 1 per difference, numeric ones |log2 a - log2 b|). Random
search is then uniform over the recording; TPE and ours propose in the space and are snapped.
The report gives the grid size and how many configs were recorded.

    python bench/replay.py --landscape bench/results/landscape_gpt2_124m_h200.json --seeds 20
    autotuner bench replay --landscape FILE [--space FILE|auto] --seeds 20 --out bench/results
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotuner.executors.replay import Landscape
from autotuner.search.space import SearchSpace, load_space, parse_space
from autotuner.spec import ModelSpec, TrialStatus, canonical_params
from autotuner.storage.session import dispose_engines, upgrade_database
from bench.replay_lib.random_orders import summary as random_orders
from bench.replay_lib.report import acceptance, floor, markdown, notes
from bench.replay_lib.run import STRATEGIES, run_once
from bench.replay_lib.stats import cost_model_offline, summarise
from bench.replay_lib.universe import auto_space, grid_size, landscape_model, universe

__all__ = ["STRATEGIES", "main", "markdown", "run_benchmark"]

RANDOM_ORDERS = 20_000


def run_benchmark(
    landscape_path: str,
    *,
    space_ref: str = "auto",
    seeds: int = 20,
    strategies: list[str] | None = None,
    budget: int | None = None,
    model: str | None = None,
    out_dir: str | None = None,
    command: str | None = None,
    progress: Any = None,
    drop_best: int = 0,
    extra_notes: list[str] | None = None,
    global_batch: int | None = None,
    minutes: float | None = None,
) -> dict[str, Any]:
    """Run the benchmark; write replay_<name>.json/.md under out_dir when given.

    minutes=M runs each study on simulated time with an M-minute budget and no trial budget,
    and reports what it recommended (acceptance item 1 of issue 10, replayed).

    drop_best=N removes the N best recorded configs first: a stress test of the search when
    the expert default's neighbourhood does not hold the optimum.

    global_batch=N keeps only the configs that ran N tokens per optimizer step and holds it
    (the auto space derives grad_accum, as `tune --global-batch N` does): configs at other
    global batches are other training runs. Without it a landscape that mixes global batches
    is replayed as recorded, and the report says so."""
    landscape = Landscape.load(landscape_path)
    spec = landscape_model(landscape, model)
    batches = global_batches(landscape, spec)
    if global_batch is not None:
        if global_batch not in batches.values():
            raise SystemExit(
                f"no recorded config ran a global batch of {global_batch:,} tokens; the "
                f"landscape's: {sorted(set(batches.values()))}"
            )
        landscape = Landscape(
            [e for e in landscape.entries if batches[id(e)] == global_batch], landscape.meta
        )
    space = auto_space(landscape) if space_ref == "auto" else load_space(space_ref)
    if global_batch is not None and space_ref == "auto":
        space = hold_global_batch(space, global_batch)
    target = landscape.target()
    if drop_best:
        ranked = sorted(
            (e for e in landscape.entries if e[1].tokens_per_s),
            key=lambda e: e[1].tokens_per_s or 0.0,
            reverse=True,
        )
        dropped = {id(e) for e in ranked[:drop_best]}
        landscape = Landscape(
            [e for e in landscape.entries if id(e) not in dropped], landscape.meta
        )
    table = universe(landscape, space)
    if not table:
        raise SystemExit("no recorded config lies inside the space; check --space")
    oks = {k: r for k, r in table.items() if r.status == TrialStatus.OK and r.tokens_per_s}
    if len(table) < 2 or not oks:
        raise SystemExit(f"{len(table)} recorded config(s), {len(oks)} measured: nothing to search")
    best_key = max(oks, key=lambda k: oks[k].tokens_per_s or 0)
    best = oks[best_key].tokens_per_s or 0.0
    budget = budget or len(table)
    names = strategies or list(STRATEGIES)
    work = Path(tempfile.mkdtemp(prefix="replay-bench-"))
    template = work / "template.db"
    upgrade_database(f"sqlite:///{template}")
    dispose_engines()
    doc: dict[str, Any] = {
        "command": command or shlex.join(sys.argv),
        "landscape": str(landscape_path),
        "hardware": _hardware(landscape),
        "model": spec.describe(),
        "space": space.model_dump(mode="json", by_alias=True),
        "grid_size": grid_size(space),
        "universe_size": len(table),
        "global_batch": global_batch,
        "global_batches": _counts(
            batches[id(e)] for e in landscape.entries if _key(e, space) in table
        ),
        "best": {"params": json.loads(best_key), "tokens_per_s": best},
        "seeds": seeds,
        "budget": budget,
        "minutes": minutes,
        "ran_on": "CPU (replay: no GPU time is spent)",
        "ran_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "strategies": {},
        "runs": [],
    }
    try:
        for name in names:
            runs = []
            for seed in range(seeds):
                r = run_once(
                    template,
                    work,
                    strategy=name,
                    seed=seed,
                    landscape=landscape,
                    table=table,
                    space=space,
                    model=spec,
                    target=target,
                    budget=budget,
                    best=best,
                    minutes=minutes,
                )
                runs.append(r)
                if progress:
                    progress(r)
            doc["strategies"][name] = summarise(runs, budget)
            doc["runs"].extend(runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # Random search's GPU-seconds without the noise of `seeds` runs: its median over many
    # drawn orders of the same configs (bench/replay_lib/random_orders.py), beside the runs' median.
    doc["random_orders"] = random_orders(
        [(r.tokens_per_s or 0.0, r.wall_s or 0.0) for r in table.values()],
        draws=RANDOM_ORDERS,
        runs=seeds,
    )
    doc["cost_model_offline"] = cost_model_offline(table, space, spec, target)
    doc["floor"] = floor(table, best)
    doc["acceptance"] = acceptance(doc)
    doc["notes"] = notes(doc, table) + list(extra_notes or [])
    mixed = {k: v for k, v in doc["global_batches"].items() if k != "unknown"}
    if global_batch is not None:
        doc["notes"].append(
            f"Global batch held at {global_batch:,} tokens per optimizer step: only the "
            "configs recorded at it are searched, grad_accum follows from the micro-batch."
        )
    elif len(mixed) > 1:
        doc["notes"].append(
            "The recorded configs ran different global batches (tokens per optimizer step: "
            f"configs) {mixed}: they are different training runs, compared here on tokens/s "
            "alone; --global-batch N replays one of them."
        )
    if drop_best:
        doc["notes"].append(
            f"Stress test: the {drop_best} best recorded config(s) were removed before the run, "
            "so the target is the best of the rest."
        )
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        stem = "replay_" + Path(landscape_path).stem.removeprefix("landscape_")
        stem += f"_gb{global_batch}" if global_batch is not None else ""
        stem += f"_dropbest{drop_best}" if drop_best else ""
        stem += f"_{minutes:g}min" if minutes is not None else ""
        (out / f"{stem}.json").write_text(json.dumps(doc, indent=1, default=str))
        (out / f"{stem}.md").write_text(markdown(doc))
        doc["written"] = [str(out / f"{stem}.json"), str(out / f"{stem}.md")]
    return doc


def global_batches(landscape: Landscape, model: ModelSpec) -> dict[int, int | None]:
    """Each entry's tokens per optimizer step (by id of the entry): its recorded
    `global_batch_tokens`, else micro-batch x grad_accum x seq_len (one GPU), else None."""
    out: dict[int, int | None] = {}
    for e in landscape.entries:
        params, result = e
        gb = params.get("global_batch_tokens") or result.tokens_per_step
        if gb is None and "micro_batch_size" in params:
            gb = int(params["micro_batch_size"]) * int(params.get("grad_accum", 1)) * model.seq_len
        out[id(e)] = int(gb) if gb else None
    return out


def hold_global_batch(space: SearchSpace, tokens: int) -> SearchSpace:
    """The space with its global batch held at `tokens`: grad_accum derived, not searched."""
    data = space.model_dump(mode="json", by_alias=True)
    data["knobs"].pop("grad_accum", None)
    data["fixed"].pop("grad_accum", None)
    data["global_batch_tokens"] = tokens
    data["name"] = f"{space.name}-gb{tokens}"
    return parse_space(data, source="landscape")


def _key(entry: tuple[dict[str, Any], Any], space: SearchSpace) -> str | None:
    params = entry[0]
    if not all(k in params for k in space.knobs):
        return None
    return canonical_params({k: params[k] for k in space.knobs})


def _counts(values: Any) -> dict[str, int]:
    c = Counter("unknown" if v is None else str(v) for v in values)
    return {
        k: c[k] for k in sorted(c, key=lambda k: (k == "unknown", int(k) if k.isdigit() else 0))
    }


def _hardware(landscape: Landscape) -> str:
    fp = next((r.fingerprint for _, r in landscape.entries if r.fingerprint), None)
    if fp is None:
        return "unknown (no fingerprint in the landscape)"
    return (
        f"{fp.device_count}x {fp.device_name} (cc {fp.compute_capability}, "
        f"{fp.memory_total_gib} GiB), driver {fp.driver}, CUDA {fp.cuda}, torch {fp.torch}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--landscape", required=True)
    ap.add_argument("--space", default="auto", help="a space file or name; auto: the landscape's")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--budget", type=int, default=None, help="trials per run (default: universe)")
    ap.add_argument(
        "--model", default=None, help="model preset or spec file (default: the landscape's)"
    )
    ap.add_argument("--out", default=None, help="write replay_*.json/.md here")
    ap.add_argument("--drop-best", type=int, default=0, help="remove the N best configs first")
    ap.add_argument("--note", action="append", default=[], help="a note for the report")
    ap.add_argument(
        "--global-batch",
        type=int,
        default=None,
        help="keep and hold one global batch (tokens per optimizer step)",
    )
    ap.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="run each study on simulated time with this time budget (as tune --minutes), "
        "with no trial budget, and report what it recommended",
    )
    args = ap.parse_args(argv)
    doc = run_benchmark(
        args.landscape,
        space_ref=args.space,
        seeds=args.seeds,
        strategies=args.strategies.split(","),
        budget=args.budget,
        model=args.model,
        out_dir=args.out,
        drop_best=args.drop_best,
        extra_notes=args.note,
        global_batch=args.global_batch,
        minutes=args.minutes,
        command="python bench/replay.py " + shlex.join(argv or sys.argv[1:]),
    )
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
