"""The study's cost model: estimate a trial's memory, calibrate on results, predict OOM."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from autotuner.search.costmodel.calibration import Calibration, Prediction
from autotuner.search.costmodel.memory import MemoryEstimate, estimate
from autotuner.spec import CompileMode, FailureClass, Knobs, ModelSpec, TrialResult

if TYPE_CHECKING:
    from autotuner.search.memory_history import Carried


class CostModel:
    """The study's memory model: estimate, calibrate on results, predict OOM before launch."""

    def __init__(
        self,
        model: ModelSpec,
        *,
        num_gpus: int,
        on_cuda: bool,
        limit_gib: float | None,
    ) -> None:
        self.model = model
        self.num_gpus = num_gpus
        self.on_cuda = on_cuda
        self.limit_gib = limit_gib
        self.calibration = Calibration(on_cuda)
        # Earlier studies' evidence it was calibrated on before the study's own trials.
        self.carried: tuple[Carried, ...] = ()

    def carry(self, carried: Sequence[Carried]) -> None:
        """Calibrate on earlier studies' trials (search/memory_history.py) before the study's
        own: once, on a model that has learnt nothing yet (none: nothing changes)."""
        if not carried:
            return
        if self.calibration.points:
            raise RuntimeError("earlier studies' evidence comes before the study's own trials")
        for c in carried:
            self.observe(c.knobs, c.result, fit=False)
        self.calibration.refit()
        self.carried = tuple(carried)

    def estimate(self, knobs: Knobs, model: ModelSpec | None = None) -> MemoryEstimate:
        return estimate(model or self.model, knobs, num_gpus=self.num_gpus, on_cuda=self.on_cuda)

    def predict(self, knobs: Knobs, limit_gib: float | None = None) -> Prediction:
        return self.calibration.predict(self.estimate(knobs), limit_gib or self.limit_gib)

    def observe(
        self,
        knobs: Knobs,
        result: TrialResult,
        *,
        fit: bool = True,
        model: ModelSpec | None = None,
        est: MemoryEstimate | None = None,
    ) -> None:
        """Learn from a finished trial: a measured peak, or an OOM (a lower bound). `model`:
        the one it ran, when not the study's (a proxy: its components scale with depth);
        `est`: its estimate, where the caller made it already (the evidence replay).

        fit=False only records it (for batches: call `calibration.refit()` after the last)."""
        est = est or self.estimate(knobs, model)
        if result.peak_mem_gib and result.tokens_per_s:
            peak = self.fitted_peak_gib(knobs, result)
            # A CUDA-graph trial's reserved peak is its need: no fragmentation ratio to learn.
            reserved = None if graph_pool_hidden(knobs, result) else result.peak_reserved_gib
            self.calibration.add_peak(est, peak, reserved, fit=fit)
        elif result.failure_class == FailureClass.OOM and "predicted" not in result.notes:
            limit = result.memory_limit_gib or self.limit_gib
            if limit:
                self.calibration.add_oom(est, oom_need_gib(result, limit), fit=fit)

    def calibrated_on(self) -> str:
        """What the calibration learnt from, in words: "9 measured trials, 4 of them from
        earlier studies of this model on this GPU"."""
        n = self.calibration.measured
        text = f"{n} measured trial{'' if n == 1 else 's'}"
        earlier = sum(1 for c in self.carried if c.measured)
        if earlier:
            text += f", {earlier} of them from earlier studies of this model on this GPU"
        return text

    def fitted_peak_gib(self, knobs: Knobs, result: TrialResult) -> float:
        """The peak a measured trial is fitted on (fitted_peak_gib below), asking for the
        fragmentation ratio (a median over every measured trial) only where it is needed."""
        if not graph_pool_hidden(knobs, result):
            return float(result.peak_mem_gib or 0.0)
        return fitted_peak_gib(knobs, result, self.calibration.fragmentation(knobs.allocator))

    def oom_violation(self, knobs: Knobs, result: TrialResult) -> float:
        """How far over the limit a measured OOM was (need / limit - 1, at least 0.01)."""
        limit = result.memory_limit_gib or self.limit_gib
        if not limit:
            return 1.0
        measured = oom_need_gib(result, limit) / limit - 1.0
        predicted = self.predict(knobs, limit).over_rel
        return max(measured, predicted, 0.01)


def fitted_peak_gib(knobs: Knobs, result: TrialResult, fragmentation: float) -> float:
    """The allocator peak a measured trial is fitted on. CUDA graphs replay into a private
    pool: reserved, but never counted as allocated while the graph replays (GPT-2 on the H200:
    1.4 GiB allocated, 8.6 reserved), so theirs is the reserved peak over the fragmentation."""
    if graph_pool_hidden(knobs, result):
        return float(result.peak_reserved_gib) / fragmentation  # type: ignore[arg-type]
    return float(result.peak_mem_gib or 0.0)


def graph_pool_hidden(knobs: Knobs, result: TrialResult) -> bool:
    """Whether the trial's allocated peak leaves out a CUDA graph pool (reduce-overhead on a
    GPU, which reports its reserved peak too)."""
    return knobs.compile_mode == CompileMode.REDUCE_OVERHEAD and bool(result.peak_reserved_gib)


def oom_need_gib(result: TrialResult, limit_gib: float) -> float:
    """A lower bound on what an OOM trial needed (GiB).

    Workers report `required_mem_gib` as the failing request ("Tried to allocate 2.00 GiB"),
    which came on top of a device already nearly full; a value above the limit is taken as the
    total need.
    """
    req = result.required_mem_gib or 0.0
    return req if req > limit_gib else limit_gib + req
