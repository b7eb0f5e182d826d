"""Memory caps and peaks for one trial process.

A cap models a smaller device (and lets tests provoke a real OOM):
- CUDA: torch.cuda.set_per_process_memory_fraction, so the caching allocator raises
  torch.OutOfMemoryError past the cap, exactly as on a smaller GPU.
- CPU: RLIMIT_AS. The limit is the address space already mapped after torch's import and thread
  pool start (libraries, arenas, stacks: several hundred MiB of it never resident) plus the
  cap, so the cap bounds what the trial itself allocates. The kernel refuses the mmap and the
  allocator raises.
"""

from __future__ import annotations

import resource

import torch

GIB = 1024**3


def _address_space_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmSize in /proc/self/status")


def apply_cap(device: torch.device, limit_gib: float | None) -> float | None:
    """Cap the trial's memory; returns the limit the trial is measured against (GiB)."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        if limit_gib is None:
            return total / GIB
        torch.cuda.set_per_process_memory_fraction(min(1.0, limit_gib * GIB / total), device)
        return limit_gib
    if limit_gib is None:
        return None
    # Start the intra-op thread pool first: its stacks would otherwise count against the cap.
    torch.ones(64, 64) @ torch.ones(64, 64)
    soft = _address_space_bytes() + int(limit_gib * GIB)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    return limit_gib


def release_cap() -> None:
    """Lift the CPU cap again so a failed trial has memory to report its failure."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))


def peaks(device: torch.device) -> tuple[float, float | None, str]:
    """(peak_mem_gib, peak_reserved_gib, memory_kind): the process's peaks so far."""
    if device.type == "cuda":
        return (
            torch.cuda.max_memory_allocated(device) / GIB,
            torch.cuda.max_memory_reserved(device) / GIB,
            "cuda",
        )
    # ru_maxrss is KiB on Linux and covers the whole process.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, None, "cpu_rss"
