"""What GPUs a node has, read through NVML without torch (fast: runs before any trial)."""

from __future__ import annotations

from typing import Any


def probe_gpus() -> dict[str, Any]:
    """Name, count, compute capability and memory of the visible GPUs; count 0 without NVML."""
    try:
        import pynvml
    except ImportError:
        return {"count": 0, "reason": "nvidia-ml-py is not installed"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"count": 0, "reason": f"NVML unavailable: {exc}"}
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return {"count": 0, "reason": "no GPU visible"}
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle).total
        return {
            "count": count,
            "name": name.decode() if isinstance(name, bytes) else name,
            "compute_capability": [major, minor],
            "memory_gib": mem / 2**30,
        }
    finally:
        pynvml.nvmlShutdown()
