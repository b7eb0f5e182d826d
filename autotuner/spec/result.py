"""What happened in one trial: `TrialResult` (status, failure class, throughput with its repeats,
MFU, memory, compile and phase times, loss, fingerprint, telemetry)."""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, model_validator

from autotuner.spec.base import SCHEMA_VERSION, _Record


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters at a word's end, with " ..." where it was cut
    (a reason cut mid-word reads as a different word). A text without a space in its second
    half is cut at the limit."""
    if len(text) <= limit:
        return text
    head = text[: max(limit - 4, 0)]
    space = max(head.rfind(" "), head.rfind("\n"))
    if space > len(head) // 2:
        head = head[:space]
    return head.rstrip() + " ..."


class TrialStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"


class FailureClass(StrEnum):
    # Properties of the config: told to the search as infeasible, never retried.
    OOM = "oom"
    UNSUPPORTED = "unsupported"
    COMPILE_ERROR = "compile_error"
    NUMERICS = "numerics"
    # Not properties of the config: infra failures, retried once.
    TIMEOUT = "timeout"
    CRASH = "crash"
    INFRA = "infra"
    # Not a property of the config either, and no retry fixes it: the worker cannot run any
    # config of the study (a package the model needs is missing, CUDA was asked for and is not
    # there, the driver does not match). The study stops at its first one, with the remedy.
    ENVIRONMENT = "environment"

    @property
    def is_config_failure(self) -> bool:
        return self in CONFIG_FAILURES


CONFIG_FAILURES = frozenset(
    {FailureClass.OOM, FailureClass.UNSUPPORTED, FailureClass.COMPILE_ERROR, FailureClass.NUMERICS}
)


class Fingerprint(_Record):
    """Hardware and software a result was measured on. Compare results only within one key."""

    device_type: Literal["cuda", "cpu"]
    device_name: str
    device_count: int
    compute_capability: str | None = None
    memory_total_gib: float | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str
    nccl: str | None = None
    python: str
    hostname: str
    cpu: str | None = None
    interconnect: str | None = None

    @property
    def key(self) -> str:
        """Stable short id over what makes results comparable (not the hostname)."""
        parts = [
            self.device_type,
            self.device_name,
            str(self.device_count),
            self.compute_capability or "",
            self.driver or "",
            self.cuda or "",
            self.torch,
        ]
        return hashlib.sha1("|".join(parts).encode()).hexdigest()[:12]


class TelemetrySeries(_Record):
    """The NVML samples themselves, aligned by index: seconds since the measured repeats began,
    and each metric at that moment (None: not read at that tick; an empty list: the driver
    does not report it). The dashboard's trial page draws them as time series."""

    t_s: list[float]
    sm_util_pct: list[float | None] = Field(default_factory=list)
    mem_util_pct: list[float | None] = Field(default_factory=list)
    power_w: list[float | None] = Field(default_factory=list)
    sm_clock_mhz: list[float | None] = Field(default_factory=list)
    temperature_c: list[float | None] = Field(default_factory=list)
    mem_used_gib: list[float | None] = Field(default_factory=list)

    @model_validator(mode="after")
    def _aligned(self) -> TelemetrySeries:
        for name in type(self).model_fields:
            values = getattr(self, name)
            if name != "t_s" and values and len(values) != len(self.t_s):
                raise ValueError(f"{name}: {len(values)} samples for {len(self.t_s)} times")
        return self


class Telemetry(_Record):
    """NVML samples during the measured repeats, summarised (None where NVML is absent), and
    the samples themselves where the worker kept them (`series`)."""

    samples: int = 0
    sm_util_mean_pct: float | None = None
    mem_util_mean_pct: float | None = None
    power_mean_w: float | None = None
    energy_j: float | None = None
    sm_clock_mean_mhz: float | None = None
    sm_clock_max_mhz: float | None = None  # the device's max SM clock, for comparison
    temperature_max_c: float | None = None
    throttle_reasons: list[str] = Field(default_factory=list)
    nvml_used_gib: float | None = None
    series: TelemetrySeries | None = None


class TrialResult(_Record):
    """What one trial measured, or how it failed."""

    schema_version: Literal[1] = SCHEMA_VERSION
    status: TrialStatus
    failure_class: FailureClass | None = None
    error_message: str | None = None
    # Throughput: the median repeat, with the min and max repeats as its spread. With several
    # ranks, tokens_per_s counts every rank and a repeat's time is the slowest rank's.
    tokens_per_s: float | None = None
    tokens_per_s_min: float | None = None
    tokens_per_s_max: float | None = None
    tokens_per_s_per_gpu: float | None = None
    repeat_tokens_per_s: list[float] = Field(default_factory=list)
    tokens_per_step: int | None = None  # micro_batch x seq_len x grad_accum x data-parallel ranks
    steps_per_repeat: int | None = None
    step_time_s: float | None = None
    # Model FLOPs utilisation (see flops_convention) against peak_flops per GPU.
    mfu: float | None = None
    flops_per_token: float | None = None
    flops_convention: str | None = None
    peak_flops: float | None = None
    peak_flops_source: str | None = None
    # Memory: the peak of the measured steps and the limit it was measured against (per GPU:
    # with several ranks, the largest rank's peak).
    peak_mem_gib: float | None = None
    peak_reserved_gib: float | None = None
    memory_kind: Literal["cuda", "cpu_rss"] | None = None
    memory_limit_gib: float | None = None
    required_mem_gib: float | None = None  # for an OOM: what the failing allocation asked for
    # With measure.headroom_check: the peaks over the whole trial, the evaluation pass and the
    # checkpoint save included (peak_mem_gib and peak_reserved_gib stop before them).
    peak_mem_with_eval_ckpt_gib: float | None = None
    peak_reserved_with_eval_ckpt_gib: float | None = None
    # For `unsupported`: the knob values the worker names as the cause (e.g. {"attention":
    # "cudnn", "precision": "fp32"}). The search learns a rule over exactly these and never
    # proposes a matching config again in the study; None: it falls back to the (attention,
    # precision, compile_mode) of the failing trial.
    unsupported_knobs: dict[str, Any] | None = None
    # Time outside the measurement: reported, never counted in throughput.
    first_step_s: float | None = None
    compile_s: float | None = None
    warmup_steps: int | None = None
    warmup_s: float | None = None
    build_s: float | None = None
    wall_s: float | None = None
    # Where the wall time went (workers/phases.py), seconds per phase in order: start (spawn
    # to the trial's first line), imports, setup, build, first_step (compile included),
    # warmup, measure, checks, eval and checkpoint (a headroom check's), exit (result written
    # to the process gone); a parity trial's first_step and measure are its parity steps.
    # overhead_s: wall_s less the measured repeats and compile_s: the time a cheaper trial
    # could save.
    phases_s: dict[str, float] | None = None
    # The build phase's parts (workers/trial.build_step), seconds: checks (the static support
    # rules), probe (the attention backend's kernel run once; absent when the rules refused),
    # model (built on the device, float8 conversion), optimizer (and the compile or parallel
    # wrapper), data (the batches). A cuDNN trial's probe takes 1.3-1.5 s on the H200 where
    # the same probe in a bare process takes 0.21 s and flash's 0.07 s
    # (bench/results/h200_session_20261204b).
    build_parts_s: dict[str, float] | None = None
    overhead_s: float | None = None
    # How the trial's process started: `fresh` (a new interpreter) or `forked` (a child of
    # the node's pre-imported worker, workers/preload.py).
    process_start: Literal["fresh", "forked"] | None = None
    # The per-study compile cache (TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR, workers/
    # compile_cache.py): inductor's FX-graph cache hits and misses (bypasses counted as
    # misses) over this trial's compiles. No hit: a cold compile, what a first run pays.
    compile_cache_hits: int | None = None
    compile_cache_misses: int | None = None
    # The worker stopped after the first timed repeat(s): they ran below
    # measure.abandon_below_tokens_per_s. Its numbers are real but not a full measurement:
    # never a recommendation, never re-measured.
    stopped_early: bool = False
    # Sanity: loss over the measured steps on synthetic data.
    loss_first: float | None = None
    loss_last: float | None = None
    # A loss-parity trial (MeasureSettings.parity_steps): the loss of every optimizer step,
    # in order, from the first. None for a throughput trial.
    loss_curve: list[float] | None = None
    param_count: int | None = None
    fingerprint: Fingerprint | None = None
    telemetry: Telemetry | None = None
    # The input pipeline (loader and file data; None for synthetic data). input_wait_share: the
    # share of the measured repeats' time the training loop spent blocked on the next batch
    # (the DataLoader's next() and the host-to-device copy); with several ranks, the largest.
    # gpu_idle_share: 1 - NVML's mean SM busy share over the repeats (None without NVML).
    # padding_share: the share of token positions that were padding (rows of a dataset shorter
    # than seq_len+1); tokens_per_s counts real tokens only.
    input_wait_share: float | None = Field(default=None, ge=0, le=1)
    gpu_idle_share: float | None = Field(default=None, ge=0, le=1)
    padding_share: float | None = Field(default=None, ge=0, lt=1)
    # Multi-GPU trials: how many rank processes measured, how the model was spread, and for a
    # failure the rank that failed first (whose failure classifies the trial).
    num_ranks: int | None = None
    parallel: str | None = None
    failed_rank: int | None = None
    # compile_scope block: the regions compiled one by one ("16 LlamaDecoderLayer blocks and the
    # output layer with its loss"), which a trainer must compile the same way for the speed
    # measured (the recommendation says so: study/compile_time.py).
    compiled_regions: str | None = None
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> TrialResult:
        if self.status == TrialStatus.OK:
            if self.tokens_per_s is None or self.tokens_per_s <= 0:
                raise ValueError("an ok result needs a positive tokens_per_s")
            if self.failure_class is not None:
                raise ValueError("an ok result has no failure_class")
        elif self.failure_class is None:
            raise ValueError("a failed result needs a failure_class")
        return self

    @classmethod
    def failure(cls, failure_class: FailureClass, message: str, **extra: Any) -> TrialResult:
        return cls(
            status=TrialStatus.FAILED,
            failure_class=failure_class,
            error_message=clip(message, 4000),
            **extra,
        )

    @property
    def compile_cache(self) -> Literal["cold", "warm", "partial"] | None:
        """cold: every compiled graph missed the cache; warm: every one hit; None: nothing
        was compiled (or the counters are unknown)."""
        hits, misses = self.compile_cache_hits or 0, self.compile_cache_misses or 0
        if hits + misses == 0:
            return None
        return "cold" if hits == 0 else "warm" if misses == 0 else "partial"

    @property
    def spread_rel(self) -> float | None:
        """Half the min-max range of the repeats, relative to the median (the noise band)."""
        return spread_rel(self.tokens_per_s, self.tokens_per_s_min, self.tokens_per_s_max)


def spread_rel(median: float | None, low: float | None, high: float | None) -> float | None:
    """Half the min-max range relative to the median; None when a number is missing."""
    if not median or low is None or high is None:
        return None
    return (high - low) / 2 / median
