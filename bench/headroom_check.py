"""The headroom check on a GPU: one config per line, measured with `headroom_check` on, each in
its own process (workers.launch.run_trial_process); prints the timed peak and the peak with the
evaluation pass and the checkpoint save, beside the device's memory.

    python3 bench/headroom_check.py            (on a GPU machine; a few minutes)
"""

from __future__ import annotations

import json
import sys

from autotuner.spec import Knobs, MeasureSettings, ModelSpec, TrialConfig
from workers.launch import run_trial_process

MEASURE = MeasureSettings(repeats=2, min_repeat_s=0.5, timeout_s=400, headroom_check=True)
CASES = [
    ("gpt2-124m", {"micro_batch_size": 16, "compile_mode": "none"}),
    ("gpt2-124m", {"micro_batch_size": 16, "compile_mode": "default"}),
    ("llama-1b", {"micro_batch_size": 8, "compile_mode": "default"}),
    ("llama-1b", {"micro_batch_size": 8, "compile_mode": "reduce-overhead"}),
]


def main() -> int:
    for preset, knobs in CASES:
        config = TrialConfig(
            model=ModelSpec.resolve({"preset": preset}),
            knobs=Knobs(precision="bf16", attention="flash", **knobs),
            measure=MEASURE,
        )
        r = run_trial_process(config, timeout_s=MEASURE.timeout_s)
        row = {
            "preset": preset,
            **knobs,
            "status": r.status.value,
            "failure": r.failure_class and r.failure_class.value,
            "tokens_per_s": r.tokens_per_s and round(r.tokens_per_s),
            "peak_alloc_gib": r.peak_mem_gib,
            "peak_reserved_gib": r.peak_reserved_gib,
            "with_eval_ckpt_alloc_gib": r.peak_mem_with_eval_ckpt_gib,
            "with_eval_ckpt_reserved_gib": r.peak_reserved_with_eval_ckpt_gib,
            "limit_gib": r.memory_limit_gib,
            "wall_s": r.wall_s and round(r.wall_s, 1),
            "error": (r.error_message or "")[-300:] or None,
        }
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
