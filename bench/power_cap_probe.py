"""Why a headroom check measures its config faster than the config's search trial did.

On the H200 every Llama trial runs at the board's power cap (NVML throttle reason SwPowerCap,
~690 W, SM clock 1,500-1,650 MHz of 1,980). The winner's headroom check, which trains the
numerics check's 50 parity steps on a learnable token stream before its timed steps, measured
the same config 1.6-3.3% faster than its search trial in all six fp8 studies where it did, with
its mean SM clock higher by about as much (bench/results/h200_session_20261204g/README.md); the
one headroom check without parity steps (2026-12-01), re-measurements in fresh processes and
GPT-2's bf16 checks agreed with their search trials within 0.6%.

Two explanations predict different things:
- data-dependent power: a trained model on structured data switches fewer bits than a random
  one on uniform random tokens, so at the same power cap the clock runs higher. Then only the
  arms that trained on the learnable stream (`after-parity`) or read it (`loader`) run faster;
- a longer warm-up: 50 more steps before timing settle the clock or the allocator. Then
  `long-warmup` (the search trial's synthetic tokens, 50 warm-up steps) runs as fast as
  `after-parity`.

Each arm runs its config in a fresh process (workers.launch.run_trial_process), the arms in
turn, `--rounds` times, so that drift over the run is spread over every arm:

    python3 bench/power_cap_probe.py --rounds 1 --out $OUT/power-cap-probe.json   (on the H200)

A round of Llama 1B is 8-9 minutes on the H200 (each arm about 2: 131 and 119 s measured on
2026-12-06, the first compile cold; `after-parity` the longest: its parity steps, evaluation
pass and checkpoint save), so one round needs a whole 10-minute call.

What the search should measure follows from the answer: a user's training runs on real data
with a model that is learning, not on uniform random tokens with random weights.

Answered on 2026-12-06 for the 1B fp8 winner (bench/results/h200_session_20261206c/README.md):
the data. `loader` ran 2.2% and `after-parity` 1.9% faster than `synthetic`, at a 3.4% and 2.7%
higher clock; `long-warmup` was no faster (-0.3%, the session before). Whether the effect
differs by config (and so could reorder configs) is the next question:
`--knobs '{"precision": "bf16", "attention": "flash"}' --arms synthetic,loader`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotuner.search.numerics import PARITY_STEPS
from autotuner.spec import Knobs, MeasureSettings, ModelSpec, TrialConfig

# What a search trial measures (MeasureSettings' defaults), and each arm's change to it.
SEARCH = {"repeats": 3, "min_repeat_s": 1.0, "timeout_s": 900}
ARMS: dict[str, dict[str, Any]] = {
    "synthetic": {},
    "long-warmup": {"warmup_min_steps": PARITY_STEPS, "warmup_max_steps": PARITY_STEPS + 30},
    "after-parity": {"headroom_check": True, "parity_steps": PARITY_STEPS},
    "loader": {"data_source": "loader"},
}
# The 1B studies' winner family (fp8, cuDNN), held at 32,768 tokens a step like the tunes.
KNOBS = {
    "micro_batch_size": 16,
    "grad_accum": 1,
    "precision": "fp8-tensorwise",
    "compile_mode": "default",
    "attention": "cudnn",
}


def config(preset: str, arm: str, knobs: dict[str, Any], device: str) -> TrialConfig:
    return TrialConfig(
        model=ModelSpec.resolve({"preset": preset}),
        knobs=Knobs(**knobs),
        measure=MeasureSettings(**SEARCH, **ARMS[arm], device=device),
    )


def row(arm: str, round_: int, r: Any) -> dict[str, Any]:
    t = r.telemetry
    return {
        "arm": arm,
        "round": round_,
        "status": r.status.value,
        "tokens_per_s": r.tokens_per_s and round(r.tokens_per_s),
        "repeats": [round(x) for x in r.repeat_tokens_per_s or []],
        "warmup_steps": r.warmup_steps,
        "sm_clock_mean_mhz": t and t.sm_clock_mean_mhz and round(t.sm_clock_mean_mhz),
        "power_mean_w": t and t.power_mean_w and round(t.power_mean_w),
        "throttle_reasons": t.throttle_reasons if t else None,
        # Whole-trial peaks: with `--knobs` a compile mode's memory is measured here too (the
        # reduce-overhead figure in gpu_validation_h200.md predates the whole-trial peak).
        "peak_mem_gib": r.peak_mem_gib and round(r.peak_mem_gib, 2),
        "peak_reserved_gib": r.peak_reserved_gib and round(r.peak_reserved_gib, 2),
        "compile_s": r.compile_s and round(r.compile_s, 1),
        "wall_s": r.wall_s and round(r.wall_s, 1),
        "error": (r.error_message or "")[-300:] or None,
    }


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each arm's median tokens/s and clock, and its ratio to `synthetic` (the search trial)."""
    out: dict[str, Any] = {}
    for arm in ARMS:
        ok = [r for r in rows if r["arm"] == arm and r["tokens_per_s"]]
        if not ok:
            continue
        out[arm] = {
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in ok),
            "sm_clock_mean_mhz": statistics.median(r["sm_clock_mean_mhz"] or 0 for r in ok),
            "runs": len(ok),
        }
    base = out.get("synthetic")
    for s in out.values():
        if base:
            s["vs_synthetic"] = round(s["tokens_per_s"] / base["tokens_per_s"], 4)
            s["clock_vs_synthetic"] = round(
                s["sm_clock_mean_mhz"] / (base["sm_clock_mean_mhz"] or 1), 4
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="llama-1b")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--arms", default=",".join(ARMS), help=f"from {', '.join(ARMS)}")
    ap.add_argument(
        "--knobs", default="{}", help="JSON: knobs to change (default: the 1B winner's)"
    )
    ap.add_argument("--device", default="cuda", help="cuda, or cpu to try the script out")
    ap.add_argument("--out", default=None, help="write the rows and the summary here (JSON)")
    args = ap.parse_args(argv)
    knobs = {**KNOBS, **json.loads(args.knobs)}
    from workers.launch import run_trial_process  # worker side: imports torch

    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        ap.error(f"unknown arms {unknown}; choose from {', '.join(ARMS)}")
    rows = []
    for round_ in range(args.rounds):
        for arm in arms:
            c = config(args.preset, arm, knobs, args.device)
            rows.append(row(arm, round_, run_trial_process(c, timeout_s=c.measure.timeout_s)))
            print(json.dumps(rows[-1]), flush=True)
    doc = {
        "preset": args.preset,
        "knobs": knobs,
        "search_measure": SEARCH,
        "arms": {a: ARMS[a] for a in arms},
        "rows": rows,
        "summary": summary(rows),
    }
    print(json.dumps(doc["summary"], indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
