"""What the trial start-up benches share (bench/trial_startup_profile.py,
bench/attention_probe_cost.py): the eager trial they take apart and a clock that synchronises
the device before each mark, so that a stage's queued kernels count in that stage."""

from __future__ import annotations

import time
from typing import Any


def eager_config(
    preset: str, micro_batch: int, attention: str | None, *, study_id: str, gpu: bool = True
) -> Any:
    """An eager (no compile) trial of `preset`: bf16 and flash on a GPU (fp32 and math on the
    CPU), `attention` where given, cpu-demo's short measurement."""
    from autotuner.search.space import load_space
    from autotuner.spec import Device, Knobs, ModelSpec, TrialConfig

    measure = load_space("cpu-demo").measure
    if not gpu:
        measure = measure.model_copy(update={"device": Device.CPU})
    knobs = {"precision": "bf16", "attention": "flash"} if gpu else {"precision": "fp32"}
    knobs["attention"] = attention or knobs.get("attention", "math")
    return TrialConfig(
        study_id=study_id,
        trial_number=0,
        model=ModelSpec.resolve({"preset": preset}),
        knobs=Knobs(**knobs, micro_batch_size=micro_batch, compile_mode="none"),
        measure=measure,
    )


class StageClock:
    """Seconds per stage: mark(stage) closes the stage that began at the previous mark."""

    def __init__(self, sync: bool) -> None:
        self.times: dict[str, float] = {}
        self._sync = sync
        self._t = time.perf_counter()

    def mark(self, stage: str) -> None:
        if self._sync:
            import torch

            torch.cuda.synchronize()
        now = time.perf_counter()
        self.times[stage] = round(now - self._t, 4)
        self._t = now
