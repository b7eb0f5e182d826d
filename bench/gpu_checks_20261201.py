"""This session's GPU checks of two changed worker paths, each a real trial process
(workers.launch.run_trial_process), GPT-2 124M eager on one GPU:

1. the headroom check (MeasureSettings.headroom_check): the checkpoint is serialized into a
   counting sink, not written to disk; its size and the check's time (phases_s.checks);
2. the numerics check's parity trials at one micro-batch per step (study/endgame.py): bf16
   (the reference) and fp8-tensorwise, 50 steps each from one seed on the learnable parity
   stream; their loss curves compared as the study compares them (search/numerics.py), against
   the 2% tolerance.

    python bench/gpu_checks_20261201.py --out DIR      # writes gpu_checks.json, prints a table
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotuner.search.numerics import PARITY_STEPS, TOLERANCE_REL, compare_curves
from autotuner.spec import Knobs, MeasureSettings, ModelSpec, TrialConfig
from workers.launch import run_trial_process


def _config(device: str, **knobs: object) -> TrialConfig:
    measure = {"repeats": 3, "min_repeat_s": 1.0, "timeout_s": 300, "device": device}
    extra = knobs.pop("measure", {})
    return TrialConfig(
        study_id="gpu-checks-20261201",
        model=ModelSpec.resolve({"preset": "gpt2-124m" if device == "cuda" else "tiny"}),
        knobs=Knobs(
            micro_batch_size=16 if device == "cuda" else 2,
            compile_mode="none",
            attention="flash" if device == "cuda" else "math",
            **knobs,
        ),
        measure=MeasureSettings.model_validate({**measure, **extra}),  # type: ignore[dict-item]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    fp8 = "fp8-tensorwise" if args.device == "cuda" else "fp32"
    runs = {
        "headroom": _config(args.device, precision="bf16", measure={"headroom_check": True}),
        "parity-bf16": _config(
            args.device, precision="bf16", measure={"parity_steps": PARITY_STEPS}
        ),
        f"parity-{fp8}": _config(
            args.device, precision=fp8, measure={"parity_steps": PARITY_STEPS}
        ),
    }
    out: dict[str, object] = {}
    for name, config in runs.items():
        t0 = time.monotonic()
        result = run_trial_process(config)
        out[name] = {"wall_s": time.monotonic() - t0, "result": result.model_dump(mode="json")}
        print(
            f"{name}: {result.status.value} {result.failure_class or ''} "
            f"wall {time.monotonic() - t0:.1f} s",
            flush=True,
        )
    curves = [out[k]["result"]["loss_curve"] for k in ("parity-bf16", f"parity-{fp8}")]  # type: ignore[index]
    if all(curves):
        diff, tail = compare_curves(curves[1], curves[0])
        out["parity"] = {
            "diff_rel": diff,
            "tail_steps": tail,
            "tolerance_rel": TOLERANCE_REL,
            "passed": diff <= TOLERANCE_REL,
        }
        print(
            f"parity {fp8} vs bf16: {diff:.3%} over the last {tail} of {len(curves[0])} "
            f"steps (tolerance {TOLERANCE_REL:.0%})"
        )
    head = out["headroom"]["result"]  # type: ignore[index]
    print(
        "headroom:",
        head.get("peak_mem_gib"),
        "->",
        head.get("peak_mem_with_eval_ckpt_gib"),
        "GiB;",
        (head.get("phases_s") or {}).get("checks"),
        "s of checks;",
        [n for n in head.get("notes", []) if n.startswith("headroom")],
    )
    (args.out / "gpu_checks.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
