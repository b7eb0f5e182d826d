"""Cost model: what one trial will cost in memory, before it is launched.

Parameters and FLOPs per token come from `autotuner.flops` (one convention for the whole
product). This module adds the peak-memory estimate that predicts OOM, as a sum of components:

| component              | what it counts (bytes)                                                 |
| static                 | fp32 weights and AdamW moments (12 B/param), the autocast weight copy   |
|                        | (2), grads kept across micro-steps (4), DDP buckets, compression bufs   |
| activations(_compiled) | what autograd keeps per token per layer (Korthikanti et al. 2022,       |
|                        | "Reducing Activation Recomputation", re-derived for our blocks, without |
|                        | dropout), by precision and checkpointing; compiled graphs keep less     |
| scores                 | the T x T attention matrices the math backend materialises (fp32)       |
| logits(_compiled)      | the fp32 loss path over the vocab: upcast, log-softmax, its gradient    |
| base                   | allocator-visible constants (cuBLAS workspace, RNG, small buffers)      |

Each component is an honest physical estimate; `Calibration` then fits one multiplier per
component to the peaks measured so far in the study (Bayesian least squares that shrinks toward
1, so a handful of trials moves it only where they carry information), and treats measured OOMs
as censored points (their peak was at least the limit). The prediction carries a standard
deviation: the cost model prunes a trial only when even its optimistic end does not fit, because
a wrongly pruned config is lost to the search for good (and the fastest config often sits right
at the memory boundary), whereas a wrongly launched one costs one short failed trial.

The allocator-visible peak (`max_memory_allocated`, what trials report as peak_mem_gib) is what
is fitted; the OOM test compares that peak x the allocator's fragmentation (reserved/allocated,
learned from the trials) + the CUDA context against the memory limit.

The peak falls at the start of backward: every activation and the loss path are alive, and the
gradients (set to None after each step) do not exist yet unless accumulation keeps them across
micro-steps; optimizer temporaries come after activations are freed. The constants were checked
against the H200 GPT-2 124M recording (bench/results/landscape_gpt2_124m_h200.json): eager bf16
and fp32 within a few percent; the compile factors are fitted to its compiled trials.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotuner.flops import flops_per_token, param_count
from autotuner.spec import (
    Attention,
    Checkpointing,
    CompileMode,
    FailureClass,
    Knobs,
    ModelFamily,
    ModelSpec,
    TrialResult,
)

GIB = 1024**3
COMPONENTS = (
    "static",
    "activations",
    "activations_compiled",
    "scores",
    "logits",
    "logits_compiled",
    "base",
)
# Priors on what torch.compile saves: inductor's min-cut partitioner recomputes cheap pointwise
# ops in backward instead of saving their outputs, and fuses the loss (calibrated per study).
COMPILED_ACTIVATION_FACTOR = 0.72
COMPILED_LOGITS_FACTOR = 0.33  # inductor fuses the loss: bf16 logits and their gradient remain
CUDA_CONTEXT_GIB = 0.6  # the CUDA context and kernel images: outside the allocator's peak
PRIOR_FRAGMENTATION = 1.05  # max_memory_reserved / max_memory_allocated
PRIOR_REL_SD = 0.5  # a priori each component may be off by half
PRIOR_BASE_SD_GIB = 1.0
MIN_MODEL_REL_SD = 0.03  # the model never claims to be better than 3%


def total_params(model: ModelSpec, knobs: Knobs) -> int:
    """Every parameter the trial allocates: padded vocab and position embeddings included."""
    vocab = padded_vocab(model.vocab_size, knobs.vocab_pad_multiple)
    positions = model.seq_len * model.d_model if model.family == ModelFamily.GPT2 else 0
    return param_count(model, vocab_size=vocab) + positions


def base_gib(on_cuda: bool) -> float:
    """Allocator-visible constants; on the CPU the peak is the RSS, torch's own included."""
    return 0.1 if on_cuda else 0.6


def padded_vocab(vocab: int, multiple: int) -> int:
    return -(-vocab // multiple) * multiple


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak memory of one trial by component (GiB), before calibration."""

    components: dict[str, float]
    on_cuda: bool

    def vector(self) -> np.ndarray:
        return np.array([self.components.get(c, 0.0) for c in COMPONENTS])

    @property
    def allocated_gib(self) -> float:
        return float(sum(self.components.values()))


def estimate(
    model: ModelSpec, knobs: Knobs, *, num_gpus: int = 1, on_cuda: bool = True
) -> MemoryEstimate:
    """The uncalibrated peak of one training step (per GPU: DDP keeps a full replica)."""
    n = total_params(model, knobs)
    static_b = 12.0 * n  # fp32 weights (4) + AdamW exp_avg, exp_avg_sq (8)
    if knobs.precision.is_half:
        static_b += 2.0 * n  # autocast caches the bf16/fp16 copy of each weight for the step
    if knobs.grad_accum > 1:
        static_b += 4.0 * n  # fp32 grads live across micro-steps (else born during backward)
    if num_gpus > 1:
        static_b += 4.0 * n  # DDP gradient buckets
        if knobs.grad_compression != "none":
            static_b += 2.0 * n
    tokens = knobs.micro_batch_size * model.seq_len
    acts_b, scores_b = _activation_bytes_per_token(model, knobs, on_cuda)
    logits_b = _logits_bytes_per_token(model, knobs)
    compiled = knobs.compile_mode != CompileMode.NONE
    comps = {c: 0.0 for c in COMPONENTS}
    comps["static"] = static_b / GIB
    comps["activations_compiled" if compiled else "activations"] = (
        tokens * acts_b / GIB * (COMPILED_ACTIVATION_FACTOR if compiled else 1.0)
    )
    comps["scores"] = tokens * scores_b / GIB
    comps["logits_compiled" if compiled else "logits"] = (
        tokens * logits_b / GIB * (COMPILED_LOGITS_FACTOR if compiled else 1.0)
    )
    comps["base"] = base_gib(on_cuda)
    return MemoryEstimate(comps, on_cuda)


def _activation_bytes_per_token(
    model: ModelSpec, knobs: Knobs, on_cuda: bool
) -> tuple[float, float]:
    """(saved activations, attention scores) per token, summed over layers, in bytes."""
    d, ff, L = model.d_model, model.ffn_dim, model.n_layer
    kv = model.kv_heads * model.head_dim
    half = knobs.precision.is_half
    b = 2.0 if half else 4.0
    llama = model.family != ModelFamily.GPT2
    # Tensors autograd saves in one block, in elements (no dropout: masks cost nothing):
    # attention: norm output (input of qkv), q/k/v (input of the kernel), kernel output
    # (input of the out-projection); llama also keeps the RoPE-rotated q and k.
    attn = d + (d + 2 * kv) + d + ((d + kv) if llama else 0)
    # MLP: norm output, fc1 output (GELU input) and GELU output (fc2 input); SwiGLU keeps
    # gate, up, silu(gate) and the product.
    mlp = d + (4 * ff if llama else 2 * ff)
    # Under autocast the residual stream stays fp32: each norm keeps its fp32 input.
    full_block = (attn + mlp) * b + 2 * d * 4.0
    if knobs.checkpointing == Checkpointing.NONE:
        per_layer, extra = full_block, 0.0
    elif knobs.checkpointing == Checkpointing.SELECTIVE:
        # Op-level policy (workers/models/checkpointing.py): every matmul and attention output
        # is kept, the norms and activations are recomputed; plus the block's input.
        matmul_outputs = (d + 2 * kv) + d + d + (2 * ff if llama else ff) + d
        per_layer, extra = matmul_outputs * b + d * 4.0, 0.0
    else:
        # Full: each block keeps only its input; backward recomputes one block at a time.
        per_layer, extra = d * 4.0, full_block
    embed_and_head = d * 4.0 * 2 + d * b  # embedding output, final norm input and output
    acts = L * per_layer + extra + embed_and_head
    scores = 0.0
    materialises = knobs.attention == Attention.MATH or (
        knobs.attention == Attention.FLEX and not on_cuda  # eager flex is a reference impl
    )
    if materialises:
        # SDPA math upcasts half inputs and keeps the fp32 softmax (n_head x T per token per
        # layer); the score matrix of the layer being computed is alive on top of it.
        layers_kept = 1 if knobs.checkpointing == Checkpointing.FULL else L
        scores = model.n_head * model.seq_len * 4.0 * (layers_kept + 1)
    return acts, scores


def _logits_bytes_per_token(model: ModelSpec, knobs: Knobs) -> float:
    # The loss runs in fp32 whatever the precision: the (upcast) logits, the saved log-softmax
    # and its gradient, 12 bytes per vocab entry per token (the half logits are freed by then).
    vocab = padded_vocab(model.vocab_size, knobs.vocab_pad_multiple)
    return vocab * 12.0


def cost_summary(model: ModelSpec) -> dict[str, Any]:
    """Parameters and FLOPs per token, as the recommendation reports them."""
    return {"param_count": param_count(model), "flops_per_token": flops_per_token(model)}


# --------------------------------------------------------------------------- calibration


@dataclass(frozen=True)
class Prediction:
    """A calibrated prediction of one trial's memory need against its limit."""

    allocated_gib: float  # the allocator-visible peak (what trials report as peak_mem_gib)
    need_gib: float  # allocated x fragmentation + CUDA context: what must fit in the limit
    sd_gib: float  # one standard deviation of need_gib
    limit_gib: float | None

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
    reserved_ratios: list[float] = field(default_factory=list)
    beta: np.ndarray = field(default_factory=lambda: np.ones(len(COMPONENTS)))
    cov: np.ndarray = field(default_factory=lambda: np.eye(len(COMPONENTS)))
    rel_sd: float = 0.05

    def __post_init__(self) -> None:
        self._fit()

    @property
    def overhead_gib(self) -> float:
        return CUDA_CONTEXT_GIB if self.on_cuda else 0.0

    @property
    def fragmentation(self) -> float:
        if not self.reserved_ratios:
            return PRIOR_FRAGMENTATION
        return float(min(1.5, max(1.0, np.median(self.reserved_ratios))))

    @property
    def measured(self) -> int:
        return sum(1 for p in self.points if not p.censored)

    def add_peak(
        self, est: MemoryEstimate, peak_gib: float, reserved_gib: float | None, *, fit: bool = True
    ) -> None:
        """A measured trial: its allocator peak (and reserved peak for fragmentation)."""
        self.points.append(_Point(est.vector(), float(peak_gib)))
        if reserved_gib and peak_gib > 0:
            self.reserved_ratios.append(reserved_gib / peak_gib)
        if fit:
            self._fit()

    def add_oom(self, est: MemoryEstimate, need_at_least_gib: float, *, fit: bool = True) -> None:
        """A measured OOM: its need was at least this (GiB, as need_gib, not allocated)."""
        bound = (need_at_least_gib - self.overhead_gib) / self.fragmentation
        self.points.append(_Point(est.vector(), max(bound, 0.0), censored=True))
        if fit:
            self._fit()

    def refit(self) -> None:
        self._fit()

    def predict(self, est: MemoryEstimate, limit_gib: float | None) -> Prediction:
        x = est.vector()
        alloc = float(x @ self.beta)
        var = float(x @ self.cov @ x) + (self.rel_sd * alloc) ** 2
        frag = self.fragmentation
        return Prediction(
            allocated_gib=alloc,
            need_gib=alloc * frag + self.overhead_gib,
            sd_gib=math.sqrt(max(var, 0.0)) * frag,
            limit_gib=limit_gib,
        )

    def _fit(self) -> None:
        k = len(COMPONENTS)
        prior_mean = np.ones(k)
        prior_sd = np.full(k, PRIOR_REL_SD)
        base = COMPONENTS.index("base")
        prior_sd[base] = PRIOR_BASE_SD_GIB / base_gib(self.on_cuda)
        prior_prec = np.diag(1.0 / prior_sd**2)
        measured = [p for p in self.points if not p.censored]
        rel_sd = max(MIN_MODEL_REL_SD, self.rel_sd)
        beta, cov = prior_mean, np.diag(prior_sd**2)
        robust = np.ones(len(measured))  # down-weights measured outliers (IRLS)
        for _ in range(4):
            censored = [p for p in self.points if p.censored and p.x @ beta < p.y]
            active = measured + censored
            if not active:
                break
            X = np.array([p.x for p in active])
            y = np.array([p.y for p in active])
            w = 1.0 / (rel_sd * np.maximum(y, 0.05) + 0.02) ** 2
            w[: len(measured)] *= robust
            A = X.T @ (X * w[:, None]) + prior_prec
            cov = np.linalg.inv(A)
            beta = cov @ (X.T @ (w * y) + prior_prec @ prior_mean)
            beta = np.maximum(beta, 0.05)  # a component cannot free memory
            if measured:
                Xm = np.array([p.x for p in measured])
                ym = np.array([p.y for p in measured])
                resid = np.abs(Xm @ beta - ym) / np.maximum(ym, 0.05)
                # One odd measurement (a memory pool the peak did not see, a misreport) must
                # not drag every prediction: residuals far beyond the typical one (MAD) count
                # less, Cauchy-style.
                scale = max(MIN_MODEL_REL_SD, 1.4826 * float(np.median(resid)))
                robust = 1.0 / (1.0 + (resid / (3.0 * scale)) ** 2)
                # Residual spread estimates how wrong the model's shape is; with few points the
                # prior's 5% stands (n/(n+3) keeps one lucky fit from claiming precision).
                n = len(measured)
                inliers = resid[resid <= 3.0 * scale]
                rms = float(np.sqrt(np.mean(inliers**2))) if inliers.size else scale
                rel_sd = max(MIN_MODEL_REL_SD, (n * rms + 3 * 0.05) / (n + 3))
        self.beta, self.cov, self.rel_sd = beta, cov, rel_sd


# --------------------------------------------------------------------------- the model


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

    def estimate(self, knobs: Knobs) -> MemoryEstimate:
        return estimate(self.model, knobs, num_gpus=self.num_gpus, on_cuda=self.on_cuda)

    def predict(self, knobs: Knobs, limit_gib: float | None = None) -> Prediction:
        return self.calibration.predict(self.estimate(knobs), limit_gib or self.limit_gib)

    def observe(self, knobs: Knobs, result: TrialResult, *, fit: bool = True) -> None:
        """Learn from a finished trial: a measured peak, or an OOM (a lower bound).

        fit=False only records it (for batches: call `calibration.refit()` after the last)."""
        if result.peak_mem_gib and result.tokens_per_s:
            self.calibration.add_peak(
                self.estimate(knobs), result.peak_mem_gib, result.peak_reserved_gib, fit=fit
            )
        elif result.failure_class == FailureClass.OOM and "predicted" not in result.notes:
            limit = result.memory_limit_gib or self.limit_gib
            if limit:
                self.calibration.add_oom(self.estimate(knobs), oom_need_gib(result, limit), fit=fit)

    def oom_violation(self, knobs: Knobs, result: TrialResult) -> float:
        """How far over the limit a measured OOM was (need / limit - 1, at least 0.01)."""
        limit = result.memory_limit_gib or self.limit_gib
        if not limit:
            return 1.0
        measured = oom_need_gib(result, limit) / limit - 1.0
        predicted = self.predict(knobs, limit).over_rel
        return max(measured, predicted, 0.01)


def oom_need_gib(result: TrialResult, limit_gib: float) -> float:
    """A lower bound on what an OOM trial needed (GiB).

    Workers report `required_mem_gib` as the failing request ("Tried to allocate 2.00 GiB"),
    which came on top of a device already nearly full; a value above the limit is taken as the
    total need.
    """
    req = result.required_mem_gib or 0.0
    return req if req > limit_gib else limit_gib + req


def sequential_errors(
    model: ModelSpec,
    trials: Iterable[tuple[int, Knobs, TrialResult]],
    *,
    num_gpus: int,
    on_cuda: bool,
    limit_gib: float | None,
) -> list[dict[str, Any]]:
    """For each measured trial in order: what the model predicted *before* it ran, and the error.

    Replays the study's calibration, so each prediction is exactly the one the search had when
    it launched the trial (later results never leak into earlier predictions).
    """
    cm = CostModel(model, num_gpus=num_gpus, on_cuda=on_cuda, limit_gib=limit_gib)
    out = []
    for number, knobs, result in trials:
        if result.peak_mem_gib and result.tokens_per_s:
            pred = cm.predict(knobs)
            out.append(
                {
                    "trial_number": number,
                    "predicted_gib": round(pred.allocated_gib, 3),
                    "measured_gib": round(result.peak_mem_gib, 3),
                    "rel_error": round(pred.allocated_gib / result.peak_mem_gib - 1.0, 4),
                }
            )
        cm.observe(knobs, result)
    return out


def error_summary(errors: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median absolute error of the at-launch predictions, overall and by halves of the study."""
    if not errors:
        return {"measured": 0}
    abs_err = [abs(e["rel_error"]) for e in errors]
    half = len(abs_err) // 2
    summary: dict[str, Any] = {
        "measured": len(errors),
        "median_abs_rel_error": round(float(np.median(abs_err)), 4),
        "max_abs_rel_error": round(max(abs_err), 4),
        "first_prediction_rel_error": errors[0]["rel_error"],
    }
    if half >= 1:
        summary["first_half_median_abs_rel_error"] = round(float(np.median(abs_err[:half])), 4)
        summary["second_half_median_abs_rel_error"] = round(float(np.median(abs_err[half:])), 4)
    return summary
