"""Two knobs on real models, each arm a trial in a fresh process (workers.launch.run_trial_process):

- `regional`: compile_scope `model` against `block` (regional compilation) on each model: the
  compile time each takes (cold: every arm has its own compile cache) and the tokens/s each
  measures, at one micro-batch. Decides whether per-block compile is worth its throughput.
- `kernels`: kernels `none`, `fused-ce` and `liger` on each model, eager (kernels compose with
  any compile: the tests show it; eager keeps the arms cheap), at the micro-batch `none` runs
  and then doubled while it fits: peak memory and tokens/s at the micro-batch each allows.

    python3 bench/hf_knobs.py regional examples/hf/llama-3.2-1b.yaml ... --out $OUT/regional.json
    python3 bench/hf_knobs.py kernels examples/hf/llama-3.2-1b.yaml ... --out $OUT/kernels.json

The JSON is written after every trial, so a call that runs out of time keeps what it measured;
`--budget-s` skips the arms that would start after it. A table is printed last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotuner.inputs import load_model_spec
from autotuner.spec import Knobs, MeasureSettings, TrialConfig, TrialStatus

BASE = {"precision": "bf16", "attention": "flash", "vocab_pad_multiple": 64}
MEASURE = MeasureSettings(repeats=3, min_repeat_s=1.0, timeout_s=900)


def _row(model: str, arm: dict[str, Any], r) -> dict[str, Any]:
    return {
        "model": model,
        **arm,
        "status": r.status.value,
        "failure_class": r.failure_class.value if r.failure_class else None,
        "error": (r.error_message or "")[:400] or None,
        "tokens_per_s": r.tokens_per_s,
        "tokens_per_s_min": r.tokens_per_s_min,
        "tokens_per_s_max": r.tokens_per_s_max,
        "mfu": r.mfu,
        "compile_s": r.compile_s,
        "first_step_s": r.first_step_s,
        "peak_mem_gib": r.peak_mem_gib,
        "peak_reserved_gib": r.peak_reserved_gib,
        "memory_limit_gib": r.memory_limit_gib,
        "wall_s": r.wall_s,
        "device": r.fingerprint.device_name if r.fingerprint else None,
        "notes": r.notes,
    }


class Recorder:
    def __init__(self, out: Path, budget_s: float):
        self.out, self.rows, self.deadline = out, [], time.monotonic() + budget_s

    def run(self, path: str, arm: dict[str, Any], study: str) -> Any:
        """One trial of `arm` on the model at `path`; None when the budget is spent."""
        if time.monotonic() > self.deadline:
            print(f"skipped (budget): {Path(path).stem} {arm}", flush=True)
            return None
        from workers.launch import run_trial_process

        spec = load_model_spec(path)
        knobs = Knobs(**{**BASE, **arm})
        config = TrialConfig(model=spec, knobs=knobs, measure=MEASURE, study_id=study)
        r = run_trial_process(config, timeout_s=MEASURE.timeout_s)
        row = _row(Path(path).stem, arm, r)
        self.rows.append(row)
        self.out.write_text(json.dumps(self.rows, indent=1))
        print(json.dumps({k: row[k] for k in list(row)[:14]}), flush=True)
        return r


def regional(models: list[str], rec: Recorder, micro_batch: int) -> None:
    for path in models:
        for scope in ("block", "model"):
            arm = {"micro_batch_size": micro_batch, "compile_mode": "default"}
            rec.run(path, {**arm, "compile_scope": scope}, f"regional-{Path(path).stem}-{scope}")


def kernels(models: list[str], rec: Recorder, micro_batch: int, doublings: int) -> None:
    for path in models:
        for value in ("none", "fused-ce", "liger"):
            mb = micro_batch
            for _ in range(doublings + 1):
                r = rec.run(path, {"micro_batch_size": mb, "kernels": value}, "kernels")
                if r is None or r.status != TrialStatus.OK:
                    break
                mb *= 2


def _table(rows: list[dict[str, Any]]) -> None:
    print(f"{'model':<22}{'arm':<34}{'tok/s':>10}{'compile s':>10}{'peak GiB':>10}  status")
    for row in rows:
        arm = " ".join(
            f"{k}={row[k]}"
            for k in ("micro_batch_size", "compile_scope", "kernels")
            if row.get(k) is not None
        )
        tps = f"{row['tokens_per_s']:,.0f}" if row["tokens_per_s"] else "-"
        comp = f"{row['compile_s']:.1f}" if row["compile_s"] is not None else "-"
        peak = f"{row['peak_mem_gib']:.1f}" if row["peak_mem_gib"] is not None else "-"
        print(f"{row['model']:<22}{arm:<34}{tps:>10}{comp:>10}{peak:>10}  {row['status']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["regional", "kernels"])
    parser.add_argument("models", nargs="+", help="model spec files (examples/hf/*.yaml)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--doublings", type=int, default=2, help="kernels: micro-batch doublings")
    parser.add_argument("--budget-s", type=float, default=540.0)
    args = parser.parse_args()
    rec = Recorder(args.out, args.budget_s)
    if args.what == "regional":
        regional(args.models, rec, args.micro_batch)
    else:
        kernels(args.models, rec, args.micro_batch, args.doublings)
    _table(rec.rows)


if __name__ == "__main__":
    main()
