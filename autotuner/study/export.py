"""The recommended config in forms a user can paste into a launcher."""

from __future__ import annotations

import json
import shlex
from typing import Any

import yaml

from autotuner.inputs import UserError

FORMATS = ("json", "yaml", "env", "torchrun")

# Knobs that are process-level environment settings rather than training-script arguments.
_ENV_KNOBS = {
    "nccl_algo": "NCCL_ALGO",
    "nccl_proto": "NCCL_PROTO",
    "nccl_min_channels": "NCCL_MIN_NCHANNELS",
    "nccl_max_channels": "NCCL_MAX_NCHANNELS",
    "nccl_buffsize": "NCCL_BUFFSIZE",
}


def render(
    rec: dict[str, Any] | None,
    fmt: str,
    *,
    study_id: str,
    config: dict[str, Any] | None = None,
    partial: str | None = None,
) -> str:
    """The recommendation `rec` as text; torchrun also needs the best trial's stored config.
    `partial` says why it is only the best so far (a cancelled study): kept in the output."""
    if rec is None:
        raise UserError(f"study {study_id} has no completed trial yet: nothing to export")
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    doc: dict[str, Any] = {"partial": partial} if partial else {}
    doc |= {
        "study": study_id,
        "trial": rec["trial_number"],
        "model": rec["model"],
        "knobs": rec["knobs"],
        "measured": {
            k: rec.get(k)
            for k in ("tokens_per_s", "tokens_per_s_per_gpu", "mfu", "peak_mem_gib", "compile_s")
        },
    }
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(doc, sort_keys=False)
    caution = [f"# CAUTION: {partial}"] if partial else []
    if fmt == "torchrun":
        script = _torchrun(rec, study_id, config).split("\n")
        return "\n".join([script[0], *caution, *script[1:]])
    lines = [f"# autotuner study {study_id}, trial #{rec['trial_number']}", *caution]
    for knob, value in rec["knobs"].items():
        if knob in _ENV_KNOBS:
            if value not in (None, "default"):
                lines.append(f"export {_ENV_KNOBS[knob]}={shlex.quote(str(value))}")
            continue
        lines.append(f"export AUTOTUNER_{knob.upper()}={shlex.quote(str(value))}")
    return "\n".join(lines) + "\n"


def _torchrun(rec: dict[str, Any], study_id: str, config: dict[str, Any] | None) -> str:
    """A shell script that re-runs the winning trial with this repo's trial runner.

    The script carries the trial's full TrialConfig (model, knobs, measurement settings) and
    starts `workers.trial` under torchrun with one process per GPU, with the process-level
    environment the trial used, so the measurement can be reproduced on the user's machine.
    """
    if not config:
        raise UserError(
            f"study {study_id}: the best trial #{rec['trial_number']} has no stored config; "
            "export --format json instead"
        )
    from autotuner.spec import TrialConfig

    # Through the record: validates what was stored and restores its field order.
    trial = TrialConfig.model_validate(config).model_copy(update={"fault": "none"})
    cfg = trial.model_dump(mode="json", exclude={"study_id", "trial_number"})
    nproc = max(int(cfg.get("num_gpus") or 1), 1)
    env: dict[str, str] = dict(cfg.get("env") or {})
    for knob, var in _ENV_KNOBS.items():
        value = rec["knobs"].get(knob)
        if value not in (None, "default"):
            env[var] = str(value)
    body = json.dumps(cfg, indent=2)
    marker = "AUTOTUNER_CONFIG_EOF"
    lines = [
        "#!/usr/bin/env bash",
        f"# autotuner study {study_id}, trial #{rec['trial_number']}: "
        f"{rec.get('tokens_per_s') or 0:,.0f} tokens/s when measured.",
        "# Run from a checkout of this repository with its worker extra installed",
        "# (pip install -e '.[worker]'); the result is printed as JSON on stdout.",
        "set -euo pipefail",
        *(f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())),
        f"cat > autotuner-best.json <<'{marker}'",
        body,
        marker,
        f"torchrun --standalone --nproc-per-node {nproc} -m workers.trial "
        "--config autotuner-best.json --result -",
    ]
    return "\n".join(lines) + "\n"
