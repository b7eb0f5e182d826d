"""Response models: the `autotuner.study.views` JSON shapes, typed for the OpenAPI schema.

The views build plain dicts (the CLI's `--json` prints the same ones); these models describe
them, field for field and in the same order, so a client can generate types from /openapi.json.
Routes declare them as `response_model` with `response_model_exclude_unset=True`: a key the
view leaves out (a field that only some studies have) stays out, a null stays null, and the JSON
a client receives is the view's. Models of shapes this package builds forbid extra keys, so a
view that grows a field without its model fails the tests instead of dropping the field.

Free-form parts stay `dict[str, Any]`: knob params, the worker's config and result records, the
model spec, the hardware fingerprint and the search policy's evidence.

The recommendation is not re-declared here: `autotuner.study.recommendation.Recommendation` is
the type study/recommend.py builds and stores, and the one served.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from autotuner.search.objective import Objective
from autotuner.storage.models import StudyStatus, TrialState
from autotuner.study.recommendation import Recommendation

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
    trial_counts: dict[str, int] = Field(
        description="Trials per state (see TrialView.state); a failed trial that the study's "
        "cancel stopped counts as `cancelled`, as the trial tables label it"
    )
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
