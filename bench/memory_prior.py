"""How far the uncalibrated memory estimate is from every peak measured on a GPU, by component
kind, against the prior's standard deviation (search/costmodel/calibration.py).

The prior's sd is what a study believes before its first trial: the expert default's
micro-batch is the largest that fits at the prediction's pessimistic end (search/seeding.py),
and a config is pruned only when its optimistic end is over. Too loose a prior costs the expert
a micro-batch (Llama 3B: mb 4 where mb 8, 106 GiB of 140, ran fine and was 4% faster); too
tight prunes configs that fit. This reads the committed landscapes (each entry a full-depth
trial with its config and measured peak) and prints, for each: the estimate's error
(estimate / measured - 1), the prior's sd relative to the estimate, and the worst
underestimate against it.

    python bench/memory_prior.py bench/results/landscape_*_h200.json
    python bench/memory_prior.py bench/results/landscape_hf_llama_3.2_1b_h100.json \
        --model examples/hf/llama-3.2-1b.yaml
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotuner.executors.replay import Landscape  # noqa: E402
from autotuner.search.costmodel import memory  # noqa: E402
from autotuner.search.costmodel.calibration import Calibration  # noqa: E402
from autotuner.search.costmodel.model import fitted_peak_gib  # noqa: E402
from autotuner.spec import Knobs, TrialStatus  # noqa: E402
from bench.replay_lib.universe import landscape_model  # noqa: E402


def errors(path: Path, model_name: str | None = None) -> list[dict[str, Any]]:
    """One row per measured entry: the estimate's relative error against the peak the cost
    model fits (CostModel.observe), and the prior's relative sd."""
    landscape = Landscape.load(path)
    model = landscape_model(landscape, model_name)  # every entry at the preset's full depth
    prior = Calibration(on_cuda=True)
    names = set(Knobs.knob_names())
    out = []
    for params, result in landscape.entries:
        if result.status != TrialStatus.OK or not result.peak_mem_gib:
            continue
        knobs = Knobs(**{k: v for k, v in params.items() if k in names})
        est = memory.estimate(model, knobs)
        predicted = prior.predict(est, None)
        peak = fitted_peak_gib(knobs, result, prior.fragmentation(knobs.allocator))
        out.append(
            {
                "error": est.allocated_gib / peak - 1.0,
                "prior_sd": predicted.sd_gib / predicted.need_gib,
                "peak_gib": peak,
                "knobs": {
                    k: getattr(knobs, k)
                    for k in ("precision", "compile_mode", "checkpointing", "micro_batch_size")
                },
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("landscapes", nargs="+", type=Path)
    ap.add_argument(
        "--model", help="model preset or spec file (default: the one each landscape names)"
    )
    args = ap.parse_args(argv)
    print("| landscape | measured | median abs error | worst under | worst over | prior sd |")
    print("| --- | ---: | ---: | --- | --- | --- |")
    for path in args.landscapes:
        rows = errors(path, args.model)
        if not rows:
            continue
        under = min(rows, key=lambda r: r["error"])
        over = max(rows, key=lambda r: r["error"])
        sds = [r["prior_sd"] for r in rows]

        def show(r: dict[str, Any]) -> str:
            k = r["knobs"]
            return (
                f"{r['error']:+.1%} ({k['precision']}, {k['compile_mode']}, ckpt "
                f"{k['checkpointing']}, mb {k['micro_batch_size']}: {r['peak_gib']:.1f} GiB)"
            )

        print(
            f"| {path.name} | {len(rows)} | {statistics.median(abs(r['error']) for r in rows):.1%}"
            f" | {show(under)} | {show(over)} | {min(sds):.0%}-{max(sds):.0%} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
