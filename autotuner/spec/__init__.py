"""The records that join the control plane (`autotuner/`) and the data plane (`workers/`).

`TrialConfig` says what one trial runs; `TrialResult` says what happened. Both are plain,
versioned, JSON round-trippable pydantic models, stored verbatim beside the indexed columns.
Everything else can change on one side without the other as long as these two hold.

One module per part of the records: base (the strict base record, the schema version), model
(ModelSpec), knobs (Knobs and their value types), measure (MeasureSettings), config
(TrialConfig, the process environment) and result (TrialResult). This package is the one import
surface of the contract: `workers/` imports `autotuner.spec` and nothing under it, so the
contract is one name on both sides (tests/unit/test_imports.py), however its parts are cut.

Nothing here imports anything heavy (no torch, no NVML): the CLI and service import it.
"""

from autotuner.spec.base import SCHEMA_VERSION
from autotuner.spec.config import (
    ALLOC_CONF_VAR,
    ALLOCATOR_SETTINGS,
    NCCL_ENV_VARS,
    NVLS_OFF_ENV,
    TrialConfig,
    process_env,
)
from autotuner.spec.knobs import (
    LEGACY_KNOBS,
    Attention,
    Checkpointing,
    CompileMode,
    CompileScope,
    Kernels,
    Knobs,
    Optimizer,
    Precision,
    canonical_params,
)
from autotuner.spec.measure import DataFile, DataSource, Device, MeasureSettings
from autotuner.spec.model import FACTORY_SIZE_ARGS, ModelFamily, ModelSpec
from autotuner.spec.result import (
    CONFIG_FAILURES,
    FailureClass,
    Fingerprint,
    Telemetry,
    TelemetrySeries,
    TrialResult,
    TrialStatus,
    clip,
    spread_rel,
)

__all__ = [
    "ALLOCATOR_SETTINGS",
    "ALLOC_CONF_VAR",
    "CONFIG_FAILURES",
    "FACTORY_SIZE_ARGS",
    "LEGACY_KNOBS",
    "NCCL_ENV_VARS",
    "NVLS_OFF_ENV",
    "SCHEMA_VERSION",
    "Attention",
    "Checkpointing",
    "CompileMode",
    "CompileScope",
    "DataFile",
    "DataSource",
    "Device",
    "FailureClass",
    "Fingerprint",
    "Kernels",
    "Knobs",
    "MeasureSettings",
    "ModelFamily",
    "ModelSpec",
    "Optimizer",
    "Precision",
    "Telemetry",
    "TelemetrySeries",
    "TrialConfig",
    "TrialResult",
    "TrialStatus",
    "canonical_params",
    "clip",
    "process_env",
    "spread_rel",
]
