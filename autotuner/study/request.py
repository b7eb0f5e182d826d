"""A study request: what `submit` (API and CLI) and `tune` ask for, validated with size limits.

A request that fails here is answered 422 (API) or one `error:` line (CLI) naming the field and
the fix, and nothing is written.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotuner.options import StudyOptions
from autotuner.search.objective import Objective, check_options

SAMPLERS = (
    "tpe",
    "random",
    "grid",
    "gp",
)  # = search.sampler.SAMPLERS, without optuna
EXPORT_FORMATS = ("json", "yaml", "env", "torchrun")
MAX_TRIALS = 10_000
MAX_MINUTES = 7 * 24 * 60.0
MAX_GPUS_PER_TRIAL = 1024
# A built-in space name or a preset name: short, no path separators (never a file path).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
        check_options(self.objective, self.options)
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
