"""What one trial runs (`TrialConfig`) and the process environment it sets before torch starts
(`process_env`: NCCL, the CUDA allocator, the user's variables)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from autotuner.spec.base import SCHEMA_VERSION, _Record
from autotuner.spec.knobs import Knobs
from autotuner.spec.measure import MeasureSettings
from autotuner.spec.model import ModelSpec


class TrialConfig(_Record):
    """What one trial runs: the model, the knob values, how to measure, how many GPUs."""

    schema_version: Literal[1] = SCHEMA_VERSION
    study_id: str | None = None
    trial_number: int | None = None
    model: ModelSpec
    knobs: Knobs = Field(default_factory=Knobs)
    measure: MeasureSettings = Field(default_factory=MeasureSettings)
    num_gpus: int = Field(default=1, ge=0, le=1024)
    # Extra environment for the trial's process (set before torch is imported).
    env: dict[str, str] = Field(default_factory=dict)
    # Deliberate faults for tests (a named, reusable fake: see workers/faults.py). Never set by
    # the search; a poisoned loss provokes `numerics`, a sleep provokes `timeout`.
    fault: Literal[
        "none",
        "nan_loss",
        "numerics_drift",
        "hang",
        "segfault",
        "exit",
        "unsupported",
        "slow_input",
    ] = "none"
    # Multi-GPU trials: the rank the fault strikes; None strikes every rank.
    fault_rank: int | None = Field(default=None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _legacy_data_source(cls, data: Any) -> Any:
        # A stored config may carry data_source among its knobs (Knobs._drop_legacy_settings
        # says which): read back, it says what that trial measured, so it moves to `measure`.
        knobs = data.get("knobs") if isinstance(data, dict) else None
        if isinstance(knobs, dict) and "data_source" in knobs:
            measure = data.get("measure")
            if isinstance(measure, dict) and "data_source" not in measure:
                data = {**data, "measure": {**measure, "data_source": knobs["data_source"]}}
            elif measure is None:
                data = {**data, "measure": {"data_source": knobs["data_source"]}}
        return data


# The environment a trial's processes get (set before torch is imported). The worker applies it
# (workers/trial.py) and the `env` export prints it: one definition, so they cannot disagree.
NVLS_OFF_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# Knob -> the NCCL variable NCCL reads at communicator init.
NCCL_ENV_VARS = {
    "nccl_algo": "NCCL_ALGO",
    "nccl_proto": "NCCL_PROTO",
    "nccl_min_channels": "NCCL_MIN_NCHANNELS",
    "nccl_max_channels": "NCCL_MAX_NCHANNELS",
    "nccl_buffsize": "NCCL_BUFFSIZE",
}


# The `allocator` knob -> its PYTORCH_CUDA_ALLOC_CONF option (torch reads the variable when CUDA
# first allocates).
ALLOC_CONF_VAR = "PYTORCH_CUDA_ALLOC_CONF"
ALLOCATOR_SETTINGS = {"expandable": "expandable_segments:True"}


def process_env(config: TrialConfig) -> dict[str, str]:
    """Environment the trial's libraries read at import or init: config.env, the NCCL knobs, the
    allocator knob (added to any PYTORCH_CUDA_ALLOC_CONF of config.env), and for several GPUs
    the NVLink-multicast-off settings (MeasureSettings.disable_nvls_multicast)."""
    env = dict(config.env)
    for knob, var in NCCL_ENV_VARS.items():
        value = getattr(config.knobs, knob)
        if value not in (None, "default"):
            env[var] = str(value)
    if (setting := ALLOCATOR_SETTINGS.get(config.knobs.allocator)) is not None:
        given = env.get(ALLOC_CONF_VAR)
        env[ALLOC_CONF_VAR] = f"{given},{setting}" if given else setting
    if config.num_gpus > 1 and config.measure.disable_nvls_multicast:
        env.update(NVLS_OFF_ENV)
    return env
