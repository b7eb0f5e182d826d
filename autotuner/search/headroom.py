"""Memory headroom: the share of GPU memory a recommendation keeps free.

A config that just fitted a 10-second trial can run out of memory hours into the real run,
which also evaluates, saves checkpoints, fragments the allocator and sees other sequence
lengths. So by default (`StudyOptions.headroom`, 10%) a measured trial whose peak leaves less
than that share of the memory limit free is *tight*: it stays in the study, is told to the
sampler as a violated constraint (by how far over the usable memory it is) and is never
recommended. The screen (screen.py) skips configs the cost model is confident would be tight.

The peak is what must fit on the device, counted as the cost model counts it
(costmodel/calibration.py): the allocator's reserved peak (the allocated one when a trial did
not report it) plus the CUDA context, which no allocator statistic sees. A trial that ran a
headroom check (MeasureSettings.headroom_check) reports a second peak, with an evaluation pass
and a checkpoint save; the larger counts.

Only a GPU's memory is held to the headroom. On the CPU the peak is the process's resident
set (memory_kind `cpu_rss`), there is usually no limit, and the host's memory is not what a
GPU run runs out of: the peak is reported beside the headroom, never enforced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from autotuner.option_defaults import DEFAULT_HEADROOM

# The CUDA context and kernel images: outside the allocator's peak. Here, not in the cost
# model (costmodel/calibration.py imports it): every trial list judges memory with it, and
# the cost model's package loads numpy, which a CLI read does not need.
CUDA_CONTEXT_GIB = 0.6

# How a peak that is not a GPU's was measured, in words.
KIND_WORDS = {"cpu_rss": "CPU resident memory", None: "memory kind not reported"}


class MemoryReport(Protocol):
    """What the functions below read of a result: a `TrialResult`, or a trial's memory columns
    (study/columns.py: lists and the recommendation read no result JSON)."""

    @property
    def peak_mem_gib(self) -> float | None: ...

    @property
    def peak_reserved_gib(self) -> float | None: ...

    @property
    def peak_mem_with_eval_ckpt_gib(self) -> float | None: ...

    @property
    def peak_reserved_with_eval_ckpt_gib(self) -> float | None: ...

    @property
    def memory_kind(self) -> str | None: ...

    @property
    def memory_limit_gib(self) -> float | None: ...


class HeadroomSetting(Protocol):
    """What the rule reads of a study's options: the share of the memory kept free. A
    `StudyOptions`, or `StoredHeadroom` where a read selects that one field."""

    @property
    def headroom(self) -> float: ...


@dataclass(frozen=True)
class StoredHeadroom:
    """A study's headroom as its stored options hold it (storage/reads.py's `STORED_HEADROOM`:
    the options keep only what differs from the defaults, so None is the default): what a trial
    list judges its rows by, without validating the whole options into their model."""

    headroom: float

    @classmethod
    def of(cls, stored: float | None) -> StoredHeadroom:
        return cls(DEFAULT_HEADROOM if stored is None else stored)


def usable_gib(limit_gib: float | None, headroom: float) -> float | None:
    """The memory a config may use: the limit less the headroom."""
    return None if limit_gib is None else limit_gib * (1.0 - headroom)


def _need(allocated: float | None, reserved: float | None, kind: str | None) -> float | None:
    if kind != "cuda":
        return allocated  # the process's resident peak: no allocator, no separate context
    peak = reserved if reserved is not None else allocated
    return None if peak is None else peak + CUDA_CONTEXT_GIB


def timed_need_gib(result: MemoryReport) -> float | None:
    """What the timed steps needed on the device (reserved peak + CUDA context on a GPU)."""
    return _need(result.peak_mem_gib, result.peak_reserved_gib, result.memory_kind)


def eval_need_gib(result: MemoryReport) -> float | None:
    """The same with the headroom check's evaluation pass and checkpoint save, if it ran."""
    return _need(
        result.peak_mem_with_eval_ckpt_gib,
        result.peak_reserved_with_eval_ckpt_gib,
        result.memory_kind,
    )


def need_gib(result: MemoryReport) -> float | None:
    """The larger of the two: what the config needs as far as this trial saw."""
    needs = [n for n in (timed_need_gib(result), eval_need_gib(result)) if n is not None]
    return max(needs) if needs else None


def on_gpu_memory(result: MemoryReport) -> bool:
    """Whether a headroom can apply to this result: a GPU's memory with a known limit."""
    return result.memory_kind == "cuda" and bool(result.memory_limit_gib)


def enforced(result: MemoryReport, options: HeadroomSetting) -> bool:
    """Whether the headroom applies to this result: a GPU's memory with a known limit."""
    return options.headroom > 0 and on_gpu_memory(result)


def over_usable(need: float, usable: float) -> float:
    """How far a need is over the usable memory (need / usable - 1; negative: within it)."""
    return need / usable - 1.0


def violation(result: MemoryReport, options: HeadroomSetting) -> float:
    """How far the peak is over the usable memory (need / usable - 1); 0 within it, and 0
    wherever the headroom is not enforced."""
    need = need_gib(result)
    usable = usable_gib(result.memory_limit_gib, options.headroom)
    if not enforced(result, options) or need is None or not usable:
        return 0.0
    return max(over_usable(need, usable), 0.0)


def free_rel(need: float | None, limit: float | None) -> float | None:
    """The share of the limit left free (negative: over it)."""
    return None if need is None or not limit else 1.0 - need / limit


def margin(results: Sequence[MemoryReport], options: HeadroomSetting) -> dict[str, Any]:
    """Peak, limit and headroom side by side for a config's measurements (the largest peak
    counts): the recommendation's `headroom` entry, without its end check."""
    needs = [(n, r) for r in results if (n := need_gib(r)) is not None]
    need, result = max(needs, key=lambda nr: nr[0]) if needs else (None, results[0])
    limit = result.memory_limit_gib
    usable = usable_gib(limit, options.headroom)
    free = free_rel(need, limit)
    on = enforced(result, options)
    out: dict[str, Any] = {
        "peak_gib": need,
        "peak_kind": result.memory_kind,
        "limit_gib": limit,
        "headroom_rel": options.headroom,
        "usable_gib": usable,
        "free_rel": free,
        "spare_gib": None if need is None or usable is None else usable - need,
        "enforced": on,
    }
    out["text"] = margin_text(out)
    return out


def margin_text(m: dict[str, Any]) -> str:
    """`peak 120.1 GiB of 139.8 GiB: 14.1% free, headroom 10% kept (5.7 GiB to spare)`."""
    need, limit, head = m["peak_gib"], m["limit_gib"], m["headroom_rel"]
    if need is None:
        return "peak memory not reported"
    if m["peak_kind"] != "cuda":
        where = f", a {limit:.1f} GiB cap" if limit else ""
        return (
            f"peak {need:.2f} GiB ({KIND_WORDS.get(m['peak_kind'], KIND_WORDS[None])}{where}): "
            f"reported, the {head:.0%} headroom applies to GPU memory only"
        )
    counted = "reserved + CUDA context"
    if not limit:
        return f"peak {need:.2f} GiB ({counted}); no memory limit known"
    text = f"peak {need:.1f} GiB ({counted}) of {limit:.1f} GiB: {m['free_rel']:.1%} free"
    if not head:
        return text + ", no headroom asked"
    if m["spare_gib"] >= 0:
        return text + f", headroom {head:.0%} kept ({m['spare_gib']:.1f} GiB to spare)"
    return text + f", less than the {head:.0%} headroom (tight by {-m['spare_gib']:.1f} GiB)"
