"""How well the throughput model predicts a config it has not seen, on recorded landscapes.

Leave-one-out: each measured config of a landscape is predicted by a model fitted to all the
others (autotuner/search/costmodel/throughput.py), against the prior alone (no fit) measured
in the same run. Reported: median and mean absolute relative error, and the median signed error
by precision, attention kernel and compile mode (a term the model lacks shows as one value
predicted one way: before the `fp8_rowwise` term, rowwise float8 came out 22% too fast on the
Llama 1B landscape; while every fused attention kernel shared one term, the memory-efficient
kernel came out 7-16% too fast on all three H200 landscapes).

    python bench/throughput_loo.py bench/results/landscape_llama_1b_h200.json --global-batch 32768
    python bench/throughput_loo.py bench/results/landscape_gpt2_124m_h200.json --out loo.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotuner.executors.replay import Landscape
from autotuner.search.costmodel.accuracy import leave_one_out_errors
from autotuner.search.costmodel.throughput import ThroughputModel
from autotuner.spec import Knobs, TrialResult, TrialStatus
from bench.replay import global_batches, hold_global_batch
from bench.replay_lib.universe import auto_space, landscape_model, universe


def held_universe(path: str, global_batch: int | None):
    """(landscape, model, space, {config key: result}) of what the replay searches on a
    landscape, at one global batch when given (configs at others are other training runs)."""
    landscape = Landscape.load(path)
    model = landscape_model(landscape, None)
    if global_batch is not None:
        batches = global_batches(landscape, model)
        kept = [e for e in landscape.entries if batches[id(e)] == global_batch]
        if not kept:
            raise SystemExit(f"{path}: no config ran a global batch of {global_batch:,} tokens")
        landscape = Landscape(kept, landscape.meta)
    space = auto_space(landscape)
    if global_batch is not None:
        space = hold_global_batch(space, global_batch)
    return landscape, model, space, universe(landscape, space)


def measured_configs(path: str, global_batch: int | None):
    """(model, target, [(knobs, result)]) of a landscape's measured configs, at one global
    batch when given (configs at others are other training runs)."""
    landscape, model, space, table = held_universe(path, global_batch)
    rows: list[tuple[Knobs, TrialResult]] = []
    for key, result in table.items():
        if result.status == TrialStatus.OK and result.tokens_per_s:
            rows.append((space.knobs_for(json.loads(key), model, 1), result))
    return model, landscape.target(), rows


# The knobs whose values get a median signed error each: where the model lacks a term.
BY_KNOB = ("precision", "attention", "compile_mode", "micro_batch_size")


def leave_one_out(model, target, rows) -> dict[str, Any]:
    fitted = leave_one_out_errors(model, target, rows)
    prior = []
    by_knob: dict[str, dict[str, list[float]]] = {knob: {} for knob in BY_KNOB}
    for (knobs, result), error in zip(rows, fitted, strict=True):
        prior_model = ThroughputModel(model, target, 1)
        prior.append(prior_model.predict(knobs).tokens_per_s / result.tokens_per_s - 1)
        for knob in BY_KNOB:
            value = getattr(knobs, knob)
            by_knob[knob].setdefault(getattr(value, "value", value), []).append(error)

    def summary(errors: list[float]) -> dict[str, float]:
        absolute = [abs(e) for e in errors]
        return {
            "median_abs": round(statistics.median(absolute), 4),
            "mean_abs": round(statistics.fmean(absolute), 4),
        }

    return {
        "configs": len(rows),
        "fitted": summary(fitted),
        "prior": summary(prior),
    } | {
        f"median_signed_by_{knob}": {
            value: {"configs": len(v), "median": round(statistics.median(v), 4)}
            for value, v in sorted(by_knob[knob].items())
        }
        for knob in BY_KNOB
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("landscape", help="a landscape JSON (bench/assemble_landscape.py)")
    ap.add_argument("--global-batch", type=int, help="only the configs at this many tokens/step")
    ap.add_argument("--out", type=Path, help="write the report as JSON here")
    args = ap.parse_args(argv)
    model, target, rows = measured_configs(args.landscape, args.global_batch)
    if len(rows) < 3:
        raise SystemExit(f"{args.landscape}: {len(rows)} measured config(s); need at least 3")
    report = {"landscape": args.landscape, "global_batch": args.global_batch}
    report |= leave_one_out(model, target, rows)
    fitted, prior = report["fitted"], report["prior"]
    print(f"{args.landscape}: {report['configs']} measured configs")
    print("  absolute error   fitted (leave-one-out)   prior only   fitted / prior")
    for stat in ("median_abs", "mean_abs"):
        ratio = fitted[stat] / prior[stat] if prior[stat] else float("nan")
        print(f"  {stat:<15}  {fitted[stat]:>22.3f}   {prior[stat]:>10.3f}   {ratio:>14.2f}")
    for knob in BY_KNOB:
        print(f"  median signed error by {knob} (+: predicted too fast)")
        for value, s in report[f"median_signed_by_{knob}"].items():
            print(f"    {value!s:<26} {s['median']:+.3f}  ({s['configs']} configs)")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
