"""The recommended config in forms a user can paste into a launcher or a trainer.

One table (`FORMATS`) names every format with what it is for, its media type and file suffix;
the trainer formats render `facts.Facts` (the knobs as trainer-neutral facts), one module each:

  json, yaml   the recommendation record (knobs and what was measured)
  env          the NCCL/torch environment the trial ran with (shell exports)
  torchrun     a script that re-runs the winning trial with this repo's trial runner
  hf           Hugging Face TrainingArguments + from_pretrained kwargs (Python)
  lightning    Lightning Trainer + DataLoader kwargs (Python)
  torchtitan   a torchtitan v0.2.2 job-config fragment (TOML)
  accelerate   an Accelerate config file (YAML)
  pytorch      plain PyTorch: prepare(model, blocks) and train_step(...) (Python)

Where a trainer cannot express a knob, its export says so in a `# NOTE:` comment.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

from autotuner.errors import UserError

if TYPE_CHECKING:
    from autotuner.study.export.facts import Facts


@dataclass(frozen=True)
class Format:
    what: str  # one line, for --help, `best` and the dashboard
    media: str  # the API's response media type
    suffix: str  # the file suffix `export -o` suggests
    # The module of this package that renders it (its `render(Facts)`), imported when it
    # renders: `best` lists the formats without loading the trainers' knob tables and the spec.
    # None: rendered here (record, torchrun).
    module: str | None = None

    @property
    def render(self) -> Callable[[Facts], str] | None:
        if self.module is None:
            return None
        render: Callable[[Facts], str] = import_module(f"{__name__}.{self.module}").render
        return render


FORMATS_TABLE: dict[str, Format] = {
    "json": Format("the recommendation as JSON", "application/json", "json"),
    "yaml": Format("the recommendation as YAML", "application/yaml", "yaml"),
    "hf": Format("Hugging Face TrainingArguments kwargs", "text/x-python", "py", "hf"),
    "lightning": Format("Lightning Trainer kwargs", "text/x-python", "py", "lightning"),
    "torchtitan": Format("torchtitan TOML fragment", "application/toml", "toml", "torchtitan"),
    "accelerate": Format("Accelerate config YAML", "application/yaml", "yaml", "accelerate"),
    "pytorch": Format("plain PyTorch snippet", "text/x-python", "py", "pytorch"),
    "env": Format("NCCL and allocator environment", "text/x-shellscript", "sh", "env"),
    "torchrun": Format("script re-running the trial", "text/x-shellscript", "sh"),
}
FORMATS = tuple(FORMATS_TABLE)


def export_commands(study_id: str) -> list[tuple[str, str]]:
    """(command, what it gives) for each trainer format: what `best` and the dashboard show."""
    return [
        (f"autotuner export {study_id} -f {name}", fmt.what)
        for name, fmt in FORMATS_TABLE.items()
        if fmt.module is not None
    ]


def render(
    rec: dict[str, Any] | None,
    fmt: str,
    *,
    study_id: str,
    config: dict[str, Any] | None = None,
    partial: str | None = None,
) -> str:
    """The recommendation `rec` as text; the trainer formats and torchrun also read the best
    trial's stored config (GPUs, environment). `partial` says why it is only the best so far (a
    cancelled study): kept in the output."""
    if rec is None:
        raise UserError(f"study {study_id} has no completed trial yet: nothing to export")
    if fmt not in FORMATS_TABLE:
        raise UserError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    renderer = FORMATS_TABLE[fmt].render
    if renderer is not None:
        from autotuner.study.export.facts import facts_from

        return renderer(facts_from(rec, study_id=study_id, config=config, partial=partial))
    if fmt == "torchrun":
        caution = [f"# CAUTION: {partial}"] if partial else []
        script = _torchrun(rec, study_id, config).split("\n")
        return "\n".join([script[0], *caution, *script[1:]])
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
    import yaml  # here: `best` lists the export commands from this module and writes no YAML

    return yaml.safe_dump(doc, sort_keys=False)


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
    from autotuner.spec import TrialConfig, process_env

    # Through the record: validates what was stored and restores its field order.
    trial = TrialConfig.model_validate(config).model_copy(update={"fault": "none"})
    cfg = trial.model_dump(mode="json", exclude={"study_id", "trial_number"})
    nproc = max(trial.num_gpus, 1)
    body = json.dumps(cfg, indent=2)
    marker = "AUTOTUNER_CONFIG_EOF"
    lines = [
        "#!/usr/bin/env bash",
        f"# autotuner study {study_id}, trial #{rec['trial_number']}: "
        f"{rec.get('tokens_per_s') or 0:,.0f} tokens/s when measured.",
        "# Run from a checkout of this repository with its worker extra installed",
        "# (pip install -e '.[worker]'); the result is printed as JSON on stdout.",
        "set -euo pipefail",
        *(f"export {k}={shlex.quote(v)}" for k, v in sorted(process_env(trial).items())),
        f"cat > autotuner-best.json <<'{marker}'",
        body,
        marker,
        f"torchrun --standalone --nproc-per-node {nproc} -m workers.trial "
        "--config autotuner-best.json --result -",
    ]
    return "\n".join(lines) + "\n"
