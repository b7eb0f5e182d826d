"""The study's cost model: estimate a trial's memory, calibrate on results, predict OOM."""

from __future__ import annotations

from autotuner.search.costmodel.calibration import Calibration, Prediction
from autotuner.search.costmodel.memory import MemoryEstimate, estimate
from autotuner.spec import CompileMode, FailureClass, Knobs, ModelSpec, TrialResult


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
    ) -> None:
        """Learn from a finished trial: a measured peak, or an OOM (a lower bound). `model`:
        the one it ran, when not the study's (a proxy: its components scale with depth).

        fit=False only records it (for batches: call `calibration.refit()` after the last)."""
        est = self.estimate(knobs, model)
        if result.peak_mem_gib and result.tokens_per_s:
            peak = fitted_peak_gib(knobs, result, self.calibration.fragmentation(knobs.allocator))
            # A CUDA-graph trial's reserved peak is its need: no fragmentation ratio to learn.
            reserved = None if _graph_pool_hidden(knobs, result) else result.peak_reserved_gib
            self.calibration.add_peak(est, peak, reserved, fit=fit)
        elif result.failure_class == FailureClass.OOM and "predicted" not in result.notes:
            limit = result.memory_limit_gib or self.limit_gib
            if limit:
                self.calibration.add_oom(est, oom_need_gib(result, limit), fit=fit)

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
    if _graph_pool_hidden(knobs, result):
        return float(result.peak_reserved_gib) / fragmentation  # type: ignore[arg-type]
    return float(result.peak_mem_gib or 0.0)


def _graph_pool_hidden(knobs: Knobs, result: TrialResult) -> bool:
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
