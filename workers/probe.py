"""What GPU a worker has (called by the Ray executor once, to size the search's target)."""

from __future__ import annotations

from typing import Any

GIB = 1024**3


def probe_gpus() -> dict[str, Any]:
    """{name, compute_capability: [major, minor], memory_gib, count} of GPU 0; {} if none."""
    import torch

    if not torch.cuda.is_available():
        return {}
    props = torch.cuda.get_device_properties(0)
    return {
        "name": props.name,
        "compute_capability": [props.major, props.minor],
        "memory_gib": round(props.total_memory / GIB, 2),
        "count": torch.cuda.device_count(),
    }
