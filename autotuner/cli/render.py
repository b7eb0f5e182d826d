"""How the verbs print the `autotuner.study.views` shapes: Rich tables for people, JSON for scripts.

Both backends (`cli/client.py`) return the same views, so each view has one renderer here.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rich.console import RenderableType
from rich.table import Table

from autotuner.cli.common import out

# Terminal escape sequences (CSI `ESC [ ... m`, OSC `ESC ] ... BEL` that sets titles or links,
# two-byte `ESC x`), then any C0/C1 control byte and the bidi/format characters that reorder
# text. Study names, error messages and params come from other users and from workers.
_ESCAPES = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]"
)


def safe(value: Any) -> str:
    """Text from outside (a study name, an error message) as it may reach a terminal: escape
    sequences and control characters stripped, line breaks and tabs made spaces, Rich markup
    escaped. Every renderer passes such text through here."""
    from rich.markup import escape

    text = _ESCAPES.sub("", str(value)).replace("\t", " ").replace("\r", " ").replace("\n", " ")
    return escape(text)


def print_json(view: Any) -> None:
    """A view as indented JSON on stdout (for scripts)."""
    print(json.dumps(view, indent=2, default=str))


def show_best(view: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(view)
    else:
        out.print(best_table(view))


def best_table(view: dict[str, Any]) -> RenderableType:
    """The recommended config with its evidence, or a line saying there is none yet."""
    from rich.text import Text

    rec = view["best"]
    if rec is None:
        return Text(
            f"study {safe(view['study'])} ({safe(view['status'])}): no completed trial yet "
            f"({view['total_trials']} trial(s) so far)"
        )
    table = Table(
        title=f"Recommended config: study {safe(view['study'])} ({safe(view['status'])})",
        show_header=False,
    )
    table.add_column(style="bold")
    table.add_column()
    for k, v in rec["knobs"].items():
        if k in rec["params"]:
            table.add_row(safe(k), safe(v))
    spread = ""
    if rec.get("tokens_per_s_min") is not None:
        spread = f"  (repeats {rec['tokens_per_s_min']:,.0f} .. {rec['tokens_per_s_max']:,.0f})"
    table.add_row("tokens/s", f"{rec['tokens_per_s']:,.0f}{spread}")
    on_gpu = (rec.get("fingerprint") or {}).get("device_type") == "cuda"
    if rec.get("tokens_per_s_per_gpu") and on_gpu:  # a CPU trial has no GPU to divide by
        table.add_row("tokens/s per GPU", f"{rec['tokens_per_s_per_gpu']:,.0f}")
    table.add_row("MFU", f"{rec['mfu']:.1%}" if rec.get("mfu") is not None else "n/a (no peak)")
    if rec.get("peak_mem_gib") is not None:
        table.add_row("peak memory", f"{rec['peak_mem_gib']:.2f} GiB")
    if rec.get("compile_s"):
        table.add_row("compile time", f"{rec['compile_s']:.1f} s (not in throughput)")
    runner = rec.get("runner_up")
    if runner:
        verdict = "a tie (within noise)" if runner["tie"] else "beyond noise"
        table.add_row(
            "margin",
            f"{runner['margin_rel']:+.1%} over trial #{runner['trial_number']}, "
            f"noise ±{runner['noise_rel']:.1%}: {verdict}",
        )
    table.add_row("trial", f"#{rec['trial_number']} of {view['total_trials']}")
    return table


def trials_table(study: dict[str, Any], views: list[dict[str, Any]]) -> Table:
    """Every trial of a study: what it tried, what it measured, or why it failed."""
    table = Table(title=f"Trials of study {safe(study['id'])} ({safe(study['status'])})")
    for col in ("#", "state", "params", "tokens/s", "spread", "MFU", "peak GiB", "note"):
        table.add_column(col, justify="right" if col in ("#", "tokens/s", "MFU") else "left")
    for v in views:
        tps = v["tokens_per_s"]
        spread = ""
        if tps and v["tokens_per_s_min"] is not None:
            spread = f"±{(v['tokens_per_s_max'] - v['tokens_per_s_min']) / 2 / tps:.1%}"
        note = f"{v['error_class']}: {v['error_message'] or ''}"[:80] if v["error_class"] else ""
        if v.get("retry_of") is not None:
            note = f"retry of #{v['retry_of']}" + (f"; {note}" if note else "")
        table.add_row(
            str(v["number"]),
            safe(v["state"]),
            safe(" ".join(f"{k}={val}" for k, val in v["params"].items())),
            f"{tps:,.0f}" if tps else "",
            spread,
            f"{v['mfu']:.1%}" if v["mfu"] is not None else "",
            f"{v['peak_mem_gib']:.2f}" if v["peak_mem_gib"] is not None else "",
            safe(note),
        )
    return table


def studies_table(views: list[dict[str, Any]]) -> Table:
    """One row per study: its state, trial counts by state and best trial."""
    table = Table(title="Studies")
    for col in ("id", "name", "status", "trials", "best #", "created"):
        table.add_column(col)
    for v in views:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(v["trial_counts"].items()))
        table.add_row(
            safe(v["id"]),
            safe(v["name"]),
            safe(v["status"]),
            safe(counts) or "-",
            str(v["best_trial_number"] if v["best_trial_number"] is not None else "-"),
            safe((v["created_at"] or "")[:19]),
        )
    return table
