"""A trial's config in and its result out: JSON files, or stdin and stdout ("-"); the result is
written atomically, so the launcher never reads half of one.
"""

from __future__ import annotations

import os
import sys

from autotuner.spec import TrialConfig, TrialResult


def read_config(path: str) -> TrialConfig:
    if path == "-":
        text = sys.stdin.read()
    else:
        with open(path) as f:
            text = f.read()
    return TrialConfig.model_validate_json(text)


def write_result(result: TrialResult, path: str) -> None:
    text = result.model_dump_json(indent=1)
    if path == "-":
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)  # atomic: the launcher never reads half a result
