"""Response models: the `autotuner.study.views` JSON shapes, typed for the OpenAPI schema.

The views build plain dicts (the CLI's `--json` prints the same ones); these models describe
them, field for field and in the same order, so a client can generate types from /openapi.json.
Routes declare them as `response_model` with `response_model_exclude_unset=True`: a key the
view leaves out (a field that only some studies have) stays out, a null stays null, and the JSON
a client receives is the view's. Models of shapes this package builds forbid extra keys, so a
view that grows a field without its model fails the tests instead of dropping the field.

Free-form parts stay `dict[str, Any]`: knob params, the worker's config and result records, the
model spec, the hardware fingerprint and the search policy's evidence.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from autotuner.search.objective import Objective
from autotuner.storage.models import StudyStatus, TrialState

_ISO = "ISO 8601 timestamp (UTC), or null when it has not happened yet"


class _View(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- studies


class StudyView(_View):
    """A study's summary and progress."""

    id: str = Field(examples=["st-1a2b3c4d"])
    name: str
    status: StudyStatus
    objective: Objective
    model: dict[str, Any] = Field(description="The model spec, resolved from a preset or inline")
    space: str | None = Field(description="The search space's name")
    sampler: str
    gpus_per_trial: int
    device_type: Literal["cuda", "cpu"] | None = Field(
        description="What the trials run on: the cluster's hardware when the study was "
        "submitted or last started; null until known (a study submitted to a bare database)"
    )
    max_trials: int | None
    max_minutes: float | None
    trial_counts: dict[str, int] = Field(description="Trials per state (see TrialView.state)")
    trials_total: int = Field(description="Trials recorded, in any state")
    trials_finished: int = Field(description="Trials no longer running")
    trials_launched: int = Field(
        description="Trials that count against max_trials: not pruned, not retries"
    )
    progress: float | None = Field(
        description="The budget spent, 0..1: trials_launched / max_trials or minutes_used / "
        "max_minutes, whichever is larger (the study ends at the first budget spent); null "
        "with no budget to measure against yet (a time budget only, not started)"
    )
    minutes_used: float | None = Field(
        description="Minutes from the study's start to its end, or to now while it runs, less "
        "the time it waited for its cluster or GPUs (`waiting`); null before it starts. Can "
        "pass max_minutes: trials launched in time run to their end"
    )
    best_value: float | None = Field(
        description="The highest objective value a search trial measured so far"
    )
    recommended_value: float | None = Field(
        description="The recommendation's objective value (the median over the recommended "
        "config's measurements), kept up to date; best_value can be higher: a trial the "
        "recommendation passed over (memory headroom, numerics)",
    )
    best_trial_number: int | None = Field(description="The recommended trial, kept up to date")
    error_message: str | None = Field(
        description="Why a failed study failed, in one line (with the remedy where there is one)"
    )
    waiting: str | None = Field(
        default=None,
        description="Why a running study launches no trial now (its Ray cluster is down or "
        "its GPUs left the cluster); null while it can. The wait is not spent from max_minutes",
    )
    created_at: str = Field(description=_ISO)
    started_at: str | None = Field(description=_ISO)
    finished_at: str | None = Field(description=_ISO)


class TrialView(_View):
    """One trial: what was tried and what it measured. Metrics are null until it completes."""

    number: int = Field(description="0, 1, 2... within the study")
    state: TrialState
    purpose: str = Field(
        description="search, expert-default (the seed the winner is compared with), seed "
        "(another config an engineer would try first), remeasure, proxy (a shallower model), "
        "or an end check of the winner: reference, parity, parity-ref, headroom"
    )
    attempt: int = Field(
        description="2 for the one retry of a timeout, crash or infra failure; a lost trial's "
        "re-run keeps the lost one's attempt (the loss was not its config's failure)"
    )
    retry_of: int | None = Field(description="The trial number this one retries")
    params: dict[str, Any] = Field(description="The knob values tried")
    tokens_per_s: float | None
    tokens_per_s_min: float | None
    tokens_per_s_max: float | None
    tokens_per_s_per_gpu: float | None
    mfu: float | None = Field(description="Model FLOPs utilisation, 0..1")
    peak_mem_gib: float | None
    compile_s: float | None
    wall_s: float | None = Field(description="The trial's wall time, start to result, seconds")
    global_batch_tokens: int | None = Field(
        description="Tokens per optimizer step: micro-batch x accumulation x ranks x seq_len"
    )
    memory_free_rel: float | None = Field(
        description="Share of the GPU memory limit its peak (reserved + CUDA context) left free"
    )
    tight: bool = Field(
        description="Complete, but leaves less than the study's memory headroom free: never "
        "recommended"
    )
    objective_value: float | None
    error_class: str | None = Field(description="oom, unsupported, timeout, crash, ...")
    error_message: str | None
    worker: str | None = Field(description="The node and process that ran it")
    fingerprint: str | None = Field(description="The hardware/software fingerprint's hash")
    started_at: str | None = Field(description=_ISO)
    finished_at: str | None = Field(description=_ISO)


class TrialDetail(TrialView):
    """A trial with the full records exchanged with the worker."""

    config: dict[str, Any] = Field(description="The TrialConfig sent to the worker, verbatim")
    result: dict[str, Any] | None = Field(description="The TrialResult, verbatim")


# --------------------------------------------------------------------------- the recommendation


class Interleaved(_View):
    """Winner and runner-up re-measured in turn (A B A B) in fresh processes."""

    pairs: int
    winner_ahead: int = Field(description="Pairs in which the winner measured faster")
    ratios: list[float] = Field(description="Winner over runner-up, pair by pair")


class RunnerUp(_View):
    """The second-best config and whether the winner beats it beyond the noise."""

    trial_number: int
    objective_value: float = Field(description="Pooled median over its measurements")
    params: dict[str, Any]
    margin_rel: float = Field(description="Winner over runner-up minus 1")
    noise_rel: float
    tie: bool = Field(description="The margin is within the noise: either config will do")
    measurements: int
    interleaved: Interleaved | None = Field(None, description="Only when both were re-measured")
    text: str = Field(description="The verdict in words")


class ParetoPoint(_View):
    """A config no other beats on both the objective (higher) and peak memory (lower)."""

    trial_number: int
    objective_value: float
    peak_mem_gib: float
    params: dict[str, Any]


class Recommendation(BaseModel):
    """The winner, its margin over the runner-up, and the evidence behind it.

    Finished studies carry the search policy's evidence too (`importance`, `cost_model`,
    `pruned`, `learned_rules`, `stopped`); live views leave those keys out.
    """

    # The policy's evidence is free-form and may grow: keep unknown keys rather than lose them.
    model_config = ConfigDict(extra="allow")

    trial_number: int
    objective: Objective
    objective_value: float = Field(description="Pooled median over the winner's measurements")
    params: dict[str, Any]
    knobs: dict[str, Any] = Field(description="Every knob of the winning config")
    model: dict[str, Any]
    tokens_per_s: float
    tokens_per_s_min: float | None
    tokens_per_s_max: float | None
    tokens_per_s_per_gpu: float | None
    mfu: float | None
    gpu_clock: dict[str, Any] | None = Field(
        None,
        description="The SM clock while the winner was timed (mean_mhz, max_mhz, power_w, "
        "capped_by: NVML's power-cap or thermal throttle reasons, text)",
    )
    peak_mem_gib: float | None
    compile_s: float | None
    fingerprint: dict[str, Any] | None = Field(description="The hardware it was measured on")
    completed_trials: int
    measurements: int = Field(description="How many times the winner was measured")
    measured_trials: list[int]
    noise_rel: float = Field(description="The study's noise band, relative")
    runner_up: RunnerUp | None
    time_to_train_h: float | None = Field(None, description="Only for objective time_to_train")
    pareto: list[ParetoPoint] = Field(description="Throughput against peak memory")
    scaling: dict[str, Any] | None = Field(
        None,
        description="Multi-GPU studies: the winner's per-GPU rate against the same config on "
        "one GPU (efficiency, the reference trial, a sentence)",
    )
    numerics: dict[str, Any] | None = Field(
        None,
        description="The loss-parity check of a winner whose precision (or 8-bit optimizer "
        "state) changes numerics (checked, passed, precision, name: the numerics in words, "
        "changes_numerics, reference_precision, tolerance_rel, diff_rel, steps, parity_trials, "
        "skipped: faster configs that failed it, preferred_over: a faster config it ties "
        "whose check has not passed, with that check's state: not run, pending or unchecked; "
        "text)",
    )
    input_pipeline: dict[str, Any] | None = Field(
        None,
        description="Studies on loader or file data: whether the winner waits for its batches "
        "(input_wait_share, gpu_idle_share, threshold, bottleneck, loader_settings, fix: the "
        "measured loader settings that waited least, text)",
    )
    headroom: dict[str, Any] | None = Field(
        None,
        description="Peak memory (reserved + CUDA context), the limit and the headroom side by "
        "side (peak_gib, peak_kind, limit_gib, headroom_rel, usable_gib, free_rel, spare_gib, "
        "enforced), the headroom check with an evaluation pass and a checkpoint save (check), "
        "faster configs passed over for memory (passed_over), text",
    )
    vs_expert_default: dict[str, Any] | None = Field(
        None,
        description="The winner against the expert default, the trial whose purpose is "
        "expert-default (trial_number, objective_value, speedup, noise_rel, text)",
    )
    global_batch: dict[str, Any] | None = Field(
        None,
        description="The winner's tokens per optimizer step (tokens), whether every measured "
        "trial ran the same (same_for_all, sizes), else the expert default's (expert_default) "
        "and the best config at it (best_at_expert), text",
    )
    importance: list[dict[str, Any]] | None = Field(
        None,
        description="Per knob: each value's best (levels), the effect (effect_rel), the "
        "importance (its share of the effects beyond noise, log scale) and a verdict, most "
        "important first (finished studies)",
    )
    cost_model: dict[str, Any] | None = Field(None, description="The memory/time model's accuracy")
    throughput_model: dict[str, Any] | None = Field(
        None,
        description="The throughput model's at-launch accuracy (model_rel_sd, errors, trials: "
        "predicted and measured tokens/s of each measured trial)",
    )
    pruned: dict[str, int] | None = Field(None, description="Configs ruled out before launch")
    learned_rules: list[str] | None = None
    stopped: str | None = Field(None, description="Why the search stopped")


class BestView(_View):
    """The best trial so far: the recommendation stored when a trial finished, with its
    evidence once the study is over."""

    study: str
    status: StudyStatus
    completed_trials: int
    total_trials: int
    max_trials: int | None = Field(description="The trial budget (null: a time budget only)")
    best: Recommendation | None = Field(description="Null until a trial completes")
    tight_fastest: dict[str, Any] | None = Field(
        None,
        description="An ended study with no recommendation because every measured trial left "
        "less memory free than the headroom: its fastest (trial_number, tokens_per_s, params, "
        "memory_free_rel, headroom, headroom_accepting: the --headroom that would accept it)",
    )
    error_message: str | None = Field(
        None,
        description="Why a failed study failed, in one line: a worker environment that cannot "
        "run it, no config of the space that can, or nothing measured (its most frequent "
        "reason, counted)",
    )


# --------------------------------------------------------------------------- the rest


class SpaceInfo(_View):
    """A built-in search space, submitted by name."""

    name: str
    description: str
    size: int | None = Field(description="Configurations in the space; null when unbounded")


class CoordinatorStatus(_View):
    """The coordinator running in the service; only `state` when it is off."""

    state: str = Field(
        description="starting, running, database unavailable, cluster unavailable, stopped, "
        "error, or off"
    )
    healthy: bool | None = Field(
        None,
        description="False while it runs no trial: starting, its thread dead, its last round "
        "failed, a round stuck for 120 s, or its cluster unavailable (`last_error` says why)",
    )
    thread_alive: bool | None = None
    last_round_age_s: float | None = Field(None, description="Seconds since its last round")
    owner: str | None = Field(None, description="Its lease owner id")
    studies_running: int | None = None
    trials_in_flight: int | None = None
    last_error: str | None = None


class Health(_View):
    """Liveness and readiness; 503 when the database is unavailable or the coordinator is
    unhealthy."""

    status: Literal["ok", "degraded"]
    database: Literal["ok", "unavailable"]
    coordinator: CoordinatorStatus
    version: str
