"""A study request: what `submit` (API and CLI) and `tune` ask for, validated with size limits.

A request that fails here is answered 422 (API) or one `error:` line (CLI) naming the field and
the fix, and nothing is written.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from autotuner.inputs import check_printable
from autotuner.options import StudyOptions
from autotuner.search.objective import Objective, check_options
from autotuner.spec import DataFile

SAMPLERS = (
    "tpe",
    "random",
    "grid",
    "gp",
)  # = search.sampler.SAMPLERS, without optuna
MAX_TRIALS = 10_000
MAX_MINUTES = 7 * 24 * 60.0
# One trial is one short training job. 512 GPUs is past the largest slice a tuning trial needs
# (tune on a slice, then scale out); a request for more is a typo or an abuse, not a study.
MAX_GPUS_PER_TRIAL = 512
# Models beyond any GPU cluster: each field can be within its own bound (1024 layers, d_model
# 65536, seq 1M) while the whole is ~5e13 parameters. These bounds sit well above the largest
# dense models trained (Llama 3 405B at 128k context: 4e11 parameters, seq x d_model 2.1e9,
# 5.7e12 FLOPs per token) and far below such absurd ones.
MAX_PARAMS = 2e12
# seq_len x d_model: one layer's activations for one sequence. 2**34 elements are 32 GiB in
# bf16 per tensor, and a layer keeps several: no GPU holds a single sequence beyond this.
MAX_SEQ_X_D_MODEL = 2**34
MAX_FLOPS_PER_TOKEN = 1e14
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
    gpus_per_trial: int = Field(default=1, ge=1, json_schema_extra={"maximum": MAX_GPUS_PER_TRIAL})
    sampler: Literal["tpe", "random", "grid", "gp"] = "tpe"
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    options: StudyOptions = Field(default_factory=StudyOptions)
    global_batch_tokens: int | None = Field(
        default=None,
        gt=0,
        le=2**40,
        description="Tokens per optimizer step, held exactly: grad_accum is derived, and "
        "micro-batches that do not divide it are pruned. Overrides the space's own.",
    )
    data: DataFile | None = Field(
        default=None,
        description="Measure on your own tokens instead of synthetic ones: {path: /abs/x.bin} "
        "(a nanoGPT-style uint16 token file; uint32 with dtype or a name saying uint32) or a "
        "datasets directory written by save_to_disk (column input_ids). The path is opened "
        "where the service runs (checked before the study starts) and on the worker machines "
        "(read there): it must exist on both. The service reads data only under the "
        "directories its operator allowed (`autotuner serve --data-dir DIR`); a path outside "
        "them, symlinks and '..' resolved, is refused. Overrides the space's measure.data.",
    )

    @field_validator("gpus_per_trial")
    @classmethod
    def _sane_gpus(cls, value: int) -> int:
        if value > MAX_GPUS_PER_TRIAL:
            raise ValueError(
                f"{value} GPUs per trial is over the limit of {MAX_GPUS_PER_TRIAL}; a trial is "
                "one short training job: tune on a slice of the cluster, then scale out"
            )
        return value

    @field_validator("name")
    @classmethod
    def _printable_name(cls, value: str | None) -> str | None:
        if value is not None:
            check_printable(value)
        return value

    @field_validator("model")
    @classmethod
    def _trainable_model(cls, value: dict[str, Any] | str) -> dict[str, Any] | str:
        problem = model_scale_problem(value)
        if problem:
            raise ValueError(problem)
        return value

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


def model_scale_problem(value: dict[str, Any] | str) -> str | None:
    """Why a model is beyond any GPU cluster (parameters, activations per sequence, FLOPs per
    token), or None. A spec that does not resolve is left to `operations.resolve_model`,
    which says what is wrong with it."""
    from autotuner.flops import flops_per_token, param_count
    from autotuner.inputs import parse_model_spec

    try:
        spec = parse_model_spec({"preset": value} if isinstance(value, str) else value)
    except ValueError:  # UserError too: reported with its remedy when the study is resolved
        return None
    sizes = (
        f"{spec.n_layer} layers, d_model {spec.d_model}, vocab {spec.vocab_size}, "
        f"seq_len {spec.seq_len}"
    )
    params = param_count(spec)
    if params > MAX_PARAMS:
        return (
            f"{params:.2g} parameters ({sizes}) is over the limit of {MAX_PARAMS:.0g}, beyond "
            "any GPU cluster; check n_layer, d_model, d_ff and vocab_size"
        )
    width = spec.seq_len * spec.d_model
    if width > MAX_SEQ_X_D_MODEL:
        return (
            f"seq_len x d_model = {spec.seq_len} x {spec.d_model} = {width:.3g} is over the limit "
            f"of {MAX_SEQ_X_D_MODEL:.3g} ({MAX_SEQ_X_D_MODEL * 2 / 2**30:.0f} GiB of bf16 "
            "activations per layer for one sequence: no GPU holds it); shorten seq_len or "
            "narrow d_model"
        )
    flops = flops_per_token(spec)
    if flops > MAX_FLOPS_PER_TOKEN:
        return (
            f"{flops:.2g} training FLOPs per token ({sizes}) is over the limit of "
            f"{MAX_FLOPS_PER_TOKEN:.0g}, beyond any GPU cluster; shorten seq_len or use "
            "fewer, narrower layers"
        )
    return None
