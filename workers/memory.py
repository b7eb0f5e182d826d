"""Memory caps and peaks for one trial process.

A cap models a smaller device (and lets tests provoke a real OOM):
- CUDA: torch.cuda.set_per_process_memory_fraction, so the caching allocator raises
  torch.OutOfMemoryError past the cap, exactly as on a smaller GPU.
- CPU: RLIMIT_AS. The limit is the address space already mapped after torch's import and thread
  pool start (libraries, arenas, stacks: several hundred MiB of it never resident) plus the
  cap, so the cap bounds what the trial itself allocates. The kernel refuses the mmap and the
  allocator raises.

A CPU trial runs under a cap even when the study sets none (`default_cpu_cap_gib`): a share of
the memory the machine has available when the trial starts. Without it, a model too big for the
machine (an absurd but in-bounds spec: 1.6e12 parameters) was not refused: the kernel's
OOM-killer took whichever process it chose, the service's or a neighbour's, not the trial. With
it the trial's own allocation fails, and the trial reports `oom`. That default is not the
limit the trial is measured against (`memory_limit_gib` stays None: a CPU's peak is reported,
never judged against a headroom); a note says it was applied.
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


# The share of the memory available at the trial's start that a CPU trial may allocate when
# the study sets no limit: the rest stays for the processes beside it (Ray, the coordinator,
# the database, other users of the machine).
DEFAULT_CPU_SHARE = 0.8


def _meminfo_bytes(field: str) -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _cgroup_room_bytes() -> int | None:
    """What this process's cgroup (v2) may still use, where it has a limit."""
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(int(limit) - used, 0)


def default_cpu_cap_gib() -> float | None:
    """DEFAULT_CPU_SHARE of the memory available now (the machine's, or the container's where
    that is less); None where neither can be read (then no cap)."""
    room = [b for b in (_meminfo_bytes("MemAvailable"), _cgroup_room_bytes()) if b is not None]
    return DEFAULT_CPU_SHARE * min(room) / GIB if room else None


def apply_cap(
    device: torch.device, limit_gib: float | None, notes: list[str] | None = None
) -> float | None:
    """Cap the trial's memory; returns the limit the trial is measured against (GiB). On the
    CPU without a limit, the default cap applies (module docstring), said in `notes`."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        if limit_gib is None:
            return total / GIB
        torch.cuda.set_per_process_memory_fraction(min(1.0, limit_gib * GIB / total), device)
        return limit_gib
    cap = limit_gib if limit_gib is not None else default_cpu_cap_gib()
    if cap is None:
        return None
    # Start the intra-op thread pool first: its stacks would otherwise count against the cap.
    torch.ones(64, 64) @ torch.ones(64, 64)
    soft = _address_space_bytes() + int(cap * GIB)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    if limit_gib is None and notes is not None:
        notes.append(
            f"CPU memory cap: the trial may allocate {cap:.1f} GiB ({DEFAULT_CPU_SHARE:.0%} of "
            "the memory available at its start; measure.memory_limit_gib sets another): past "
            "it, it fails as oom rather than the machine's OOM-killer taking a process"
        )
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
