"""The API's request bodies, validated at the edge with size limits.

A request that fails here is answered 422 with a message naming the field and the fix, and
nothing is written. The response bodies are the `autotuner.views` shapes, the same JSON the CLI
prints with `--json`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotuner.objective import Objective

SAMPLERS = ("tpe", "random", "grid", "gp")  # autotuner.search.SAMPLERS, without importing optuna
EXPORT_FORMATS = ("json", "yaml", "env", "torchrun")
MAX_TRIALS = 10_000
MAX_MINUTES = 7 * 24 * 60.0
MAX_GPUS_PER_TRIAL = 1024
# A built-in space name or a preset name: short, no path separators (never a file path).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StudyOptions(_Strict):
    """Per-study options beside the search itself."""

    usd_per_gpu_hour: float | None = Field(
        default=None, gt=0, le=10_000, description="Price of one GPU hour, for cost objectives."
    )
    planned_tokens: float | None = Field(
        default=None, gt=0, le=1e16, description="Length of the real run, for time_to_train."
    )
    planned_hours: float | None = Field(
        default=None, gt=0, le=1e5, description="Or the run's length in hours, for time_to_train."
    )
    max_mem_gib: float | None = Field(
        default=None, gt=0, le=1e5, description="Memory ceiling: configs above it are infeasible."
    )
    early_stop_patience: int | None = Field(
        default=None,
        ge=0,
        le=10_000,
        description="Stop after this many trials without improvement beyond noise (0: never).",
    )
    remeasure_top: int | None = Field(
        default=None, ge=0, le=10, description="Top candidates re-measured before recommending."
    )
    remeasure_rounds: int | None = Field(
        default=None, ge=0, le=10, description="Interleaved re-measurement rounds (A B A B)."
    )
    history_seeds: int | None = Field(
        default=None, ge=0, le=50, description="Earlier winners (same GPU and family) tried first."
    )
    neighbour_seeds: bool | None = Field(
        default=None, description="Also seed the expert default's nearest alternatives."
    )


class StudyRequest(_Strict):
    """Submit a study: a model, a search space, an objective and a budget."""

    model: dict[str, Any] | str = Field(
        description="A model spec mapping (preset and/or sizes, or hf_config), or a preset name.",
        examples=[{"preset": "tiny"}, "gpt2-124m"],
    )
    space: dict[str, Any] | str = Field(
        default="single-gpu-quick",
        description="A built-in space name (GET /api/spaces) or an inline space mapping.",
    )
    name: str | None = Field(default=None, min_length=1, max_length=200)
    objective: Objective = Objective.TOKENS_PER_S
    max_trials: int | None = Field(default=None, ge=1, le=MAX_TRIALS)
    max_minutes: float | None = Field(default=None, gt=0, le=MAX_MINUTES)
    gpus_per_trial: int = Field(default=1, ge=1, le=MAX_GPUS_PER_TRIAL)
    sampler: Literal["tpe", "random", "grid", "gp"] = "tpe"
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    options: StudyOptions = Field(default_factory=StudyOptions)

    @model_validator(mode="after")
    def _check(self) -> StudyRequest:
        if self.max_trials is None and self.max_minutes is None:
            raise ValueError("a study needs a budget: give max_trials, max_minutes or both")
        if self.objective == Objective.MTOKENS_PER_USD and not self.options.usd_per_gpu_hour:
            raise ValueError(
                "objective mtokens_per_usd needs options.usd_per_gpu_hour (the price of one "
                "GPU hour in US dollars)"
            )
        for field, value in (("model", self.model), ("space", self.space)):
            if isinstance(value, str) and not _is_name(value):
                raise ValueError(
                    f"{field}: {value[:40]!r} is not a name; give a built-in {field} name "
                    f"(letters, digits, '.', '_' or '-') or an inline mapping"
                )
        return self


def _is_name(value: str) -> bool:
    import re

    return re.fullmatch(NAME_PATTERN, value) is not None
