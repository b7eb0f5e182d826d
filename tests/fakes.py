"""Named fakes for what this machine lacks (GPUs). Reused across test folders."""

from __future__ import annotations

import itertools
import zlib
from typing import Any

from autotuner.executors.replay import Landscape
from autotuner.spec import FailureClass, Fingerprint, TrialResult, TrialStatus

FAKE_GPU = Fingerprint(
    device_type="cuda", device_name="FakeGpu H200", device_count=1, compute_capability="9.0",
    memory_total_gib=80.0, driver="0", cuda="13.0", torch="2.13.0", python="3.11",
    hostname="fake",
)


def synthetic_landscape(
    knobs: dict[str, list[Any]], *, seed_best: dict[str, Any] | None = None
) -> Landscape:
    """A deterministic landscape over the grid of `knobs`, shaped like a real one.

    Throughput grows with micro-batch until memory runs out (OOM past 32 in fp32, 64 in bf16),
    bf16 beats fp32 by 1.8x, checkpointing costs 25%, the fused optimizer wins 3%; anything else
    varies by a few percent. Repeats have a 1% spread.
    """
    names = list(knobs)
    entries = []
    for values in itertools.product(*(knobs[n] for n in names)):
        p = dict(zip(names, values, strict=True))
        mb = int(p.get("micro_batch_size", 8))
        half = p.get("precision", "fp32") != "fp32"
        ckpt = p.get("checkpointing", "none") != "none"
        limit = (64 if half else 32) * (2 if ckpt else 1)
        if mb > limit:
            result = TrialResult.failure(
                FailureClass.OOM, "CUDA out of memory (synthetic)",
                required_mem_gib=80.0 * mb / limit, memory_limit_gib=80.0, wall_s=5.0,
            )
        else:
            tps = 10_000.0 * (mb / (mb + 8)) * (1.8 if half else 1.0) * (0.75 if ckpt else 1.0)
            if p.get("optimizer") == "adamw-fused":
                tps *= 1.03
            tps *= 1.0 + 0.002 * (zlib.crc32(str(sorted(p.items())).encode()) % 10) / 10
            result = TrialResult(
                status=TrialStatus.OK, tokens_per_s=tps, tokens_per_s_min=tps * 0.99,
                tokens_per_s_max=tps * 1.01, tokens_per_s_per_gpu=tps, peak_mem_gib=mb * 1.0,
                fingerprint=FAKE_GPU, wall_s=10.0,
            )
        entries.append((p, result))
    return Landscape(entries)
