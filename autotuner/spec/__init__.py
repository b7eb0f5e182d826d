"""The records that join the control plane (`autotuner/`) and the data plane (`workers/`).

`TrialConfig` says what one trial runs; `TrialResult` says what happened. Both are plain,
versioned, JSON round-trippable pydantic models, stored verbatim beside the indexed columns.
Everything else can change on one side without the other as long as these two hold.

One module per part of the records: base (the strict base record, the schema version), model
(ModelSpec), knobs (Knobs and their value types), measure (MeasureSettings), config
(TrialConfig, the process environment) and result (TrialResult); and what both planes decide
alike: support_rules (which knob combinations cannot run where, read by the search's screen
and by the worker's support check) with liger (the architectures Liger-Kernel patches). This
package is the one import surface of the contract: `workers/` imports `autotuner.spec` and
nothing under it, so the contract is one name on both sides (tests/unit/test_imports.py),
however its parts are cut.

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
from autotuner.spec.support_rules import (
    Hardware,
    RuleKind,
    Verdict,
    attention_verdict,
    packages_needed,
    parallel_verdicts,
    support_verdicts,
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
    "Hardware",
    "Kernels",
    "Knobs",
    "MeasureSettings",
    "ModelFamily",
    "ModelSpec",
    "Optimizer",
    "Precision",
    "RuleKind",
    "Telemetry",
    "TelemetrySeries",
    "TrialConfig",
    "TrialResult",
    "TrialStatus",
    "Verdict",
    "attention_verdict",
    "canonical_params",
    "clip",
    "packages_needed",
    "parallel_verdicts",
    "process_env",
    "spread_rel",
    "support_verdicts",
]
