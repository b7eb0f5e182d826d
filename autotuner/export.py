"""The recommended config in forms a user can paste into a launcher."""

from __future__ import annotations

import json
import shlex
from typing import Any

import yaml

from autotuner.inputs import UserError

FORMATS = ("json", "yaml", "env")

# Knobs that are process-level environment settings rather than training-script arguments.
_ENV_KNOBS = {
    "nccl_algo": "NCCL_ALGO",
    "nccl_proto": "NCCL_PROTO",
    "nccl_min_channels": "NCCL_MIN_NCHANNELS",
}


def render(rec: dict[str, Any] | None, fmt: str, *, study_id: str) -> str:
    if rec is None:
        raise UserError(f"study {study_id} has no completed trial yet: nothing to export")
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    doc = {
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
    lines = [f"# autotuner study {study_id}, trial #{rec['trial_number']}"]
    for knob, value in rec["knobs"].items():
        if knob in _ENV_KNOBS:
            if value not in (None, "default"):
                lines.append(f"export {_ENV_KNOBS[knob]}={shlex.quote(str(value))}")
            continue
        lines.append(f"export AUTOTUNER_{knob.upper()}={shlex.quote(str(value))}")
    return "\n".join(lines) + "\n"
