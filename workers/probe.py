"""What GPU a worker has (called by the Ray executor once, to size the search's target)."""

from __future__ import annotations

from typing import Any

GIB = 1024**3


def nvidia_driver_present() -> bool:
    """Whether NVML answers on this node: a real NVIDIA driver, checked without torch or CUDA
    (a test cluster's logical GPUs have none)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:  # no library, no driver
        return False


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
