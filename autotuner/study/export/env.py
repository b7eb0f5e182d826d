"""The process environment the trial ran with, as shell exports: NCCL's own variables (the NCCL
knobs), the CUDA caching allocator's mode (the allocator knob), the trial's extra environment
and, on several GPUs, the NVLink-multicast-off settings. Nothing here is an autotuner variable:
every name is read by NCCL, torch or NVSHMEM."""

from __future__ import annotations

import shlex

from autotuner.spec import ALLOC_CONF_VAR, NCCL_ENV_VARS, NVLS_OFF_ENV
from autotuner.study.export.facts import Facts


def render(f: Facts) -> str:
    lines = [*f.header(), "# The environment the trial's processes had; source it before torchrun."]
    if not f.env:
        lines.append(
            "# (nothing to set: NCCL's own defaults were measured"
            + (")" if f.distributed else ", and one process runs no collectives)")
        )
    if f.distributed and set(NVLS_OFF_ENV) <= set(f.env):
        lines.append(
            "# NCCL_NVLS_ENABLE=0 etc.: measured with NVLink multicast off (the lent machines "
            "lack it); drop these three where NVLS works"
        )
    if f.knobs.allocator != "default":
        lines.append(
            f"# {ALLOC_CONF_VAR}: the CUDA allocator mode the trial was measured with "
            f"(allocator={f.knobs.allocator}); its peak memory depends on it"
        )
    nccl = set(NCCL_ENV_VARS.values())
    if not f.distributed and nccl & set(f.env):
        lines.append("# one GPU: the NCCL variables below change nothing until you add GPUs")
    lines += [f"export {name}={shlex.quote(value)}" for name, value in sorted(f.env.items())]
    lines.append(
        "# The training knobs are not environment variables: see --format hf, lightning, "
        "torchtitan, accelerate or pytorch."
    )
    return "\n".join(lines) + "\n"
