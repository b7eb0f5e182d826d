"""The winner's compile time as a user's first run pays it: its cold compile.

Trials of one study share a compile cache (workers/compile_cache.py), so a config measured
again (a re-measurement, a headroom check) compiles from the cache in a fraction of the time.
The recommendation reports the compile of the winner's first measurement that found nothing in
the cache; when every measurement of it hit the cache (another config compiled the same graphs
first), it says so rather than pass a warm compile off as what a first run costs.
"""

from __future__ import annotations

import statistics
from typing import Any, Protocol

from autotuner.spec import TrialResult


class _Measured(Protocol):  # measurements.ConfigMeasurements, without importing it
    @property
    def results(self) -> list[TrialResult]: ...

    @property
    def trials(self) -> list[Any]: ...


def compile_entry(best: _Measured) -> dict[str, Any] | None:
    """{cold_s, cold_trial, warm_s, cache, text} for a compiled winner; None when it ran eager.
    A regional compile's `regions` says what was compiled on its own: the speed measured needs
    the trainer to compile the same regions (the exports say how)."""
    runs = [(t.number, r) for t, r in zip(best.trials, best.results, strict=True)]
    compiled = [(n, r) for n, r in runs if r.compile_s is not None]
    if not compiled:
        return None
    out = _entry(compiled)
    regions = next((r.compiled_regions for _, r in compiled if r.compiled_regions), None)
    if regions is not None:
        out["regions"] = (
            f"{regions}, each compiled on its own: your trainer must compile the same "
            "regions for this speed (autotuner export shows how)"
        )
    return out


def _entry(compiled: list[tuple[int, TrialResult]]) -> dict[str, Any]:
    cold = next(((n, r) for n, r in compiled if r.compile_cache == "cold"), None)
    warm = [r.compile_s for _, r in compiled if r.compile_cache == "warm" and r.compile_s]
    warm_s = statistics.median(warm) if warm else None
    from_cache = f"; {warm_s:.1f} s from the study's compile cache" if warm_s is not None else ""
    out: dict[str, Any] = {"cold_s": None, "cold_trial": None, "warm_s": warm_s}
    if cold is not None:
        number, result = cold
        out.update(cold_s=result.compile_s, cold_trial=number, cache="cold")
        out["text"] = f"{result.compile_s:.1f} s cold (trial #{number}){from_cache}"
        return out
    number, result = compiled[0]
    if result.compile_cache is None:  # counters not recorded (a trial from before they were)
        out.update(cold_s=result.compile_s, cold_trial=number, cache=None)
        out["text"] = f"{result.compile_s:.1f} s (trial #{number}; cache use not recorded)"
        return out
    hits, misses = result.compile_cache_hits or 0, result.compile_cache_misses or 0
    out["cache"] = "warm" if misses == 0 else "partial"
    out["text"] = (
        f"not measured cold: {hits} of {hits + misses} compiled graphs of its first "
        f"measurement (trial #{number}, {result.compile_s:.1f} s) came from the study's "
        "compile cache (another config compiled them first); a first run compiles longer"
    )
    return out
