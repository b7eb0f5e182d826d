"""Calibration: per-study multipliers on the estimate's components, fitted to measured peaks.

`Calibration` fits one multiplier per component of the physical estimate (`memory.py`) to the
peaks measured so far in the study (Bayesian least squares that shrinks toward 1, so a handful
of trials moves it only where they carry information), and treats measured OOMs as censored
points (their peak was at least the limit). The prediction carries a standard deviation: the
cost model prunes a trial only when even its optimistic end does not fit, because a wrongly
pruned config is lost to the search for good (and the fastest config often sits right at the
memory boundary), whereas a wrongly launched one costs one short failed trial.

The allocator-visible peak (`max_memory_allocated`, what trials report as peak_mem_gib) is what
is fitted; the OOM test compares that peak x the allocator's fragmentation (reserved/allocated,
learned from the trials per allocator mode, Knobs.allocator) + the CUDA context against the
memory limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from autotuner.search.costmodel.memory import COMPONENTS, MemoryEstimate, base_gib
from autotuner.search.costmodel.regression import fit_relative
from autotuner.search.headroom import CUDA_CONTEXT_GIB

# max_memory_reserved / max_memory_allocated before a study has measured any, per allocator
# mode. The default allocator's medians on the H200 landscapes were 1.03 (Llama 1B), 1.05 (3B)
# and 1.09 (GPT-2 124M), up to 1.34 (GPT-2 eager micro-batch 64) and 1.16 (Llama 8B, 8-bit
# AdamW, micro-batch 1). Expandable segments coalesce what a fresh cudaMalloc per request
# strands; 1.02 is a prior not yet measured on a GPU (bench/gpu_plan.md row 4), and the
# study's own trials with that mode replace it.
PRIOR_FRAGMENTATION = {"default": 1.05, "expandable": 1.02}
# How far one config's ratio may sit from the mode's median, before the study has seen a spread
# of its own: the default allocator's ratios on the H200 landscapes (compiled and eager, CUDA
# graphs aside) spread by about 0.05 around their medians, and Llama 8B's two trials were 1.03
# and 1.16. The study's own ratios replace it as they come (FRAGMENTATION_PRIOR_WEIGHT
# pseudo-observations of the prior). Without it the 8B 8-bit seed was predicted to need
# 104 GiB with no more doubt than its allocation's, and reserved 122.
PRIOR_FRAGMENTATION_SD = {"default": 0.05, "expandable": 0.02}
FRAGMENTATION_PRIOR_WEIGHT = 2.0
PRIOR_REL_SD = 0.5  # a priori a component may be off by half ...
# ... except where the H200 trials say it is better known (`python bench/memory_prior.py
# bench/results/landscape_*_h200.json`: 100 full-depth configs of GPT-2 124M, Llama 1B and 3B,
# never more than 5.2% under in all, and Llama 8B 0.7% under). The static part is arithmetic on
# the parameter count; compiled activations were at most ~10% under (Llama 3B bf16 mb 8: 4.7% of
# the total); compiled float8's own component puts fp8 totals from 19% under (CUDA graphs at
# micro-batch 2) to 9% over on the Llama landscapes, so it is kept as loose as bf16's. At 0.5
# the expert default of Llama 3B was micro-batch 4 where 8 fits with 24% free (106 GiB of 140)
# and runs as fast as the best bf16 config.
PRIOR_COMPONENT_REL_SD = {
    "static": 0.1,
    "activations_compiled": 0.35,
    "activations_compiled_fp8": 0.35,
}
PRIOR_BASE_SD_GIB = 1.0
MIN_MODEL_REL_SD = 0.03  # the model never claims to be better than 3%


@dataclass(frozen=True)
class Prediction:
    """A calibrated prediction of one trial's memory need against its limit."""

    allocated_gib: float  # the allocator-visible peak (what trials report as peak_mem_gib)
    need_gib: float  # allocated x fragmentation + CUDA context: what must fit in the limit
    sd_gib: float  # one standard deviation of need_gib
    limit_gib: float | None
    fragmentation: float = 1.0  # the ratio need_gib was computed with

    def surely_over(self, z: float) -> bool:
        """Even the optimistic end (need - z sd) is over the limit."""
        return self.limit_gib is not None and self.need_gib - z * self.sd_gib > self.limit_gib

    def surely_fits(self, z: float) -> bool:
        return self.limit_gib is None or self.need_gib + z * self.sd_gib <= self.limit_gib

    @property
    def over_rel(self) -> float:
        """need / limit - 1 (how far over; negative: headroom)."""
        if not self.limit_gib:
            return -1.0
        return self.need_gib / self.limit_gib - 1.0


@dataclass(frozen=True)
class Increase:
    """A calibrated prediction of how much more one config needs than another (GiB)."""

    mean_gib: float
    sd_gib: float
    # What the first config is predicted to need in the components that grow (its share of
    # the need that the difference scales): where a measured peak exceeds the prediction,
    # the excess may lie there.
    grows_gib: float


@dataclass
class _Point:
    x: np.ndarray
    y: float  # measured allocated peak (GiB), or the censoring bound for an OOM
    censored: bool = False


@dataclass
class Calibration:
    """Per-study multipliers on the estimate's components, fitted to measured peaks."""

    on_cuda: bool
    points: list[_Point] = field(default_factory=list)
    # reserved / allocated of the measured trials, per allocator mode
    reserved_ratios: dict[str, list[float]] = field(default_factory=dict)
    beta: np.ndarray = field(default_factory=lambda: np.ones(len(COMPONENTS)))
    cov: np.ndarray = field(default_factory=lambda: np.eye(len(COMPONENTS)))
    rel_sd: float = 0.05
    # fragmentation()'s median per allocator mode with the count of ratios it was taken over:
    # the ratios only grow (add_peak appends), so a count that did not change is the same
    # median. Recomputed per call, a replay's OOM trials took a median over every trial seen
    # each (quadratic: seconds at the end of a 50,000-trial study).
    _fragmentation: dict[str, tuple[int, float]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self._fit()

    @property
    def overhead_gib(self) -> float:
        return CUDA_CONTEXT_GIB if self.on_cuda else 0.0

    def fragmentation_sd(self, allocator: str = "default") -> float:
        """The spread of one config's reserved/allocated ratio around the mode's: the prior's,
        pooled with the study's own ratios in that mode."""
        prior = PRIOR_FRAGMENTATION_SD.get(allocator, PRIOR_FRAGMENTATION_SD["default"])
        ratios = self.reserved_ratios.get(allocator, [])
        if len(ratios) < 2:
            return prior
        spread = float(np.sum((np.array(ratios) - np.mean(ratios)) ** 2))
        k = FRAGMENTATION_PRIOR_WEIGHT
        return math.sqrt((k * prior**2 + spread) / (k + len(ratios) - 1))

    def fragmentation(self, allocator: str = "default") -> float:
        """reserved / allocated under this allocator mode: the median of the study's trials
        that ran with it, else the prior."""
        ratios = self.reserved_ratios.get(allocator)
        if not ratios:
            return PRIOR_FRAGMENTATION.get(allocator, PRIOR_FRAGMENTATION["default"])
        known = self._fragmentation.get(allocator)
        if known is None or known[0] != len(ratios):
            value = float(min(1.5, max(1.0, np.median(ratios))))
            known = self._fragmentation[allocator] = (len(ratios), value)
        return known[1]

    @property
    def measured(self) -> int:
        return sum(1 for p in self.points if not p.censored)

    def add_peak(
        self, est: MemoryEstimate, peak_gib: float, reserved_gib: float | None, *, fit: bool = True
    ) -> None:
        """A measured trial: its allocator peak (and reserved peak for fragmentation)."""
        self.points.append(_Point(est.vector(), float(peak_gib)))
        if reserved_gib and peak_gib > 0:
            self.reserved_ratios.setdefault(est.allocator, []).append(reserved_gib / peak_gib)
        if fit:
            self._fit()

    def add_oom(self, est: MemoryEstimate, need_at_least_gib: float, *, fit: bool = True) -> None:
        """A measured OOM: its need was at least this (GiB, as need_gib, not allocated)."""
        bound = (need_at_least_gib - self.overhead_gib) / self.fragmentation(est.allocator)
        self.points.append(_Point(est.vector(), max(bound, 0.0), censored=True))
        if fit:
            self._fit()

    def refit(self) -> None:
        self._fit()

    def predict(self, est: MemoryEstimate, limit_gib: float | None) -> Prediction:
        x = est.vector()
        alloc = float(x @ self.beta)
        var = float(x @ self.cov @ x) + (self.rel_sd * alloc) ** 2
        frag = self.fragmentation(est.allocator)
        frag_var = (alloc * self._frag_sd(est.allocator)) ** 2
        return Prediction(
            allocated_gib=alloc,
            need_gib=alloc * frag + self.overhead_gib,
            sd_gib=math.sqrt(max(var, 0.0) * frag**2 + frag_var),
            limit_gib=limit_gib,
            fragmentation=frag,
        )

    def predict_increase(self, start: MemoryEstimate, end: MemoryEstimate) -> Increase:
        """How much more `end` needs than `start` (need_gib, GiB), under the calibrated
        multipliers. Only the components that differ count, so a config's measured peak plus
        this is its neighbour's need with the doubt of the difference alone: the weights,
        gradients and optimizer state a micro-batch does not change add none. The
        fragmentation ratio is `end`'s mode's (both run under one allocator where this is
        asked)."""
        x0, x1 = start.vector(), end.vector()
        dx = x1 - x0
        delta = float(dx @ self.beta)
        var = float(dx @ self.cov @ dx) + (self.rel_sd * delta) ** 2
        frag = self.fragmentation(end.allocator)
        frag_var = (delta * self._frag_sd(end.allocator)) ** 2
        grows = float(np.where(dx > 0, x0, 0.0) @ self.beta) * frag
        return Increase(delta * frag, math.sqrt(max(var, 0.0) * frag**2 + frag_var), grows)

    def predict_many(
        self, vectors: np.ndarray, allocators: Sequence[str] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """`predict`'s need_gib and sd_gib for rows of `MemoryEstimate.vector()` at once, each
        row under its allocator mode (`allocators`, default: the default allocator)."""
        alloc = vectors @ self.beta
        var = np.einsum("ij,jk,ik->i", vectors, self.cov, vectors) + (self.rel_sd * alloc) ** 2
        modes = allocators if allocators is not None else ["default"] * len(alloc)
        frags = {mode: self.fragmentation(mode) for mode in set(modes)}
        sds = {mode: self._frag_sd(mode) for mode in set(modes)}
        frag = np.array([frags[mode] for mode in modes]).reshape(alloc.shape)
        frag_sd = np.array([sds[mode] for mode in modes]).reshape(alloc.shape)
        sd = np.sqrt(np.maximum(var, 0.0) * frag**2 + (alloc * frag_sd) ** 2)
        return alloc * frag + self.overhead_gib, sd

    def _frag_sd(self, allocator: str) -> float:
        """fragmentation_sd where the allocator reports a reserved peak (a GPU), else 0."""
        return self.fragmentation_sd(allocator) if self.on_cuda else 0.0

    def _fit(self) -> None:
        k = len(COMPONENTS)
        prior_sd = np.array([PRIOR_COMPONENT_REL_SD.get(c, PRIOR_REL_SD) for c in COMPONENTS])
        base = COMPONENTS.index("base")
        prior_sd[base] = PRIOR_BASE_SD_GIB / base_gib(self.on_cuda)
        measured = [p for p in self.points if not p.censored]
        censored = [p for p in self.points if p.censored]

        def binding_ooms(beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            # A censored OOM pulls on the fit only while the fit predicts it below its bound.
            rows = [p for p in censored if p.x @ beta < p.y]
            return np.array([p.x for p in rows]).reshape(len(rows), k), np.array(
                [p.y for p in rows]
            )

        fit = fit_relative(
            np.array([p.x for p in measured]).reshape(len(measured), k),
            np.array([p.y for p in measured]),
            prior_mean=np.ones(k),
            prior_sd=prior_sd,
            y_floor=0.05,
            abs_sd=0.02,
            prior_rel_sd=0.05,
            min_rel_sd=MIN_MODEL_REL_SD,
            beta_floor=0.05,
            start_rel_sd=self.rel_sd,
            extra_rows=binding_ooms,
        )
        self.beta, self.cov, self.rel_sd = fit.beta, fit.cov, fit.rel_sd
