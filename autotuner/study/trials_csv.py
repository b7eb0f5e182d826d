"""A study's trials as CSV: one row per trial, one column per knob, units in the column names.

What the dashboard's download button gives (the table's rows, filtered as shown): the columns
of `views.trial_view`, the knobs spread into columns of their own so a spreadsheet can pivot on
them, and the `cancelled` label the pages show. A text cell a spreadsheet would run as a formula
(=, +, -, @ first: an error message, a worker name) is quoted with a leading apostrophe.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from autotuner.study.labels import trial_label

# The columns after the knobs, as trial_view names them (their units in the name).
METRICS = (
    "global_batch_tokens",
    "tokens_per_s",
    "tokens_per_s_min",
    "tokens_per_s_max",
    "tokens_per_s_per_gpu",
    "mfu",
    "peak_mem_gib",
    "memory_free_rel",
    "compile_s",
    "wall_s",
    "objective_value",
)
TAIL = ("error_class", "error_message", "worker", "fingerprint", "started_at", "finished_at")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def trials_csv(trials: Sequence[dict[str, Any]], knobs: Sequence[str]) -> str:
    """`trials` (trial_view dicts) as CSV text with a header row."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["number", "state", "purpose", "attempt", "retry_of", *knobs, *METRICS, *TAIL])
    for t in trials:
        params = t.get("params") or {}
        writer.writerow(
            [
                t["number"],
                trial_label(t),
                t.get("purpose"),
                t.get("attempt"),
                _cell(t.get("retry_of")),
                *(_cell(params.get(k)) for k in knobs),
                *(_cell(t.get(m)) for m in METRICS),
                *(_cell(t.get(c)) for c in TAIL),
            ]
        )
    return out.getvalue()
