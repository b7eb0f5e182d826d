"""How the verbs print the `autotuner.study.views` shapes: Rich tables for people, JSON for scripts.

Both backends (`cli/client.py`) return the same views, so each view has one renderer here.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table

from autotuner.cli.common import out, safe
from autotuner.purpose import Purpose
from autotuner.study.labels import (
    PURPOSE_TAGS,
    SINGLE_REPEAT,
    budget_used,
    no_recommendation_note,
    purpose_tag,
    spread_text,
    trial_label,
    unfinished_note,
)


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

    if view["best"] is None:
        study, status = safe(view["study"]), safe(view["status"])
        return Text(f"study {study} ({status}): {no_recommendation_note(view)}")
    # The JSON of study/recommendation.py's `Recommendation` (what study/recommend.py builds
    # and the API serves), read as it is: validating it again took pydantic and the model, a
    # tenth of a cold `best`. Its optional entries may be absent (`get`).
    rec = view["best"]
    unfinished = unfinished_note(view)
    title = f"Recommended config: study {safe(view['study'])} ({safe(view['status'])})"
    if unfinished:
        title = f"Best so far (not a recommendation): study {safe(view['study'])}"
    rejudged = rec.get("rejudged")
    if rejudged:
        title = f"Re-judged at a {rejudged['headroom']:.1%} headroom: study {safe(view['study'])}"
    table = Table(title=title, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    if rejudged:
        table.add_row("re-judged", safe(rejudged["text"]))
    for k, v in rec["knobs"].items():
        if k in rec["params"]:
            table.add_row(safe(k), safe(v))
    spread = ""
    if spread_text(view["best"]) == SINGLE_REPEAT:  # no spread measured: none to print
        spread = "  (1 timed repeat: no spread measured)"
    elif rec["tokens_per_s_min"] is not None and rec["tokens_per_s_max"] is not None:
        spread = f"  (repeats {rec['tokens_per_s_min']:,.0f} .. {rec['tokens_per_s_max']:,.0f})"
    table.add_row("tokens/s", f"{rec['tokens_per_s']:,.0f}{spread}")
    on_gpu = (rec["fingerprint"] or {}).get("device_type") == "cuda"
    if rec["tokens_per_s_per_gpu"] and on_gpu:  # a CPU trial has no GPU to divide by
        table.add_row("tokens/s per GPU", f"{rec['tokens_per_s_per_gpu']:,.0f}")
    table.add_row("MFU", f"{rec['mfu']:.1%}" if rec["mfu"] is not None else "n/a (no peak)")
    if (clock := rec.get("gpu_clock")) and clock.get("text"):
        table.add_row("GPU clock", safe(clock["text"]))
    if memory := rec.get("headroom"):
        for label, text in memory_rows(memory):
            table.add_row(label, safe(text))
    elif rec["peak_mem_gib"] is not None:
        table.add_row("peak memory", f"{rec['peak_mem_gib']:.2f} GiB")
    if (batch := rec.get("global_batch")) and batch.get("text"):
        table.add_row("global batch", safe(batch["text"]))
    if (compiled := rec.get("compile")) and compiled.get("text"):
        table.add_row("compile time", safe(compiled["text"]) + " (not in throughput)")
    elif rec["compile_s"]:  # a recommendation stored before the compile entry
        table.add_row("compile time", f"{rec['compile_s']:.1f} s (not in throughput)")
    if compiled and compiled.get("regions"):  # a regional compile: what the trainer must do
        table.add_row("compiled", safe(compiled["regions"]))
    if (runner := rec["runner_up"]) is not None:
        verdict = "a tie (within noise)" if runner["tie"] else "beyond noise"
        margin = runner["margin_rel"]
        # Negative where a tie was settled for the reference numerics (the numerics row).
        ahead = (
            f"{margin:+.1%} over trial #{runner['trial_number']}"
            if margin >= 0
            else f"trial #{runner['trial_number']} {-margin / (1 + margin):.1%} faster"
        )
        table.add_row("margin", f"{ahead}, noise ±{runner['noise_rel']:.1%}: {verdict}")
    if (fresh := rec.get("fresh_run")) and fresh.get("text"):
        table.add_row("fresh run", safe(fresh["text"]))
    if (expert := rec.get("vs_expert_default")) and expert.get("text"):
        table.add_row("vs default", safe(expert["text"]))
    if numerics := rec.get("numerics"):
        # It quotes a failed parity trial's error message: text from the worker.
        table.add_row("numerics", safe(numerics["text"]))
    # Why the search ended: converged, budget, time kept for the checks.
    if stopped := rec.get("stopped"):
        table.add_row("search", safe(stopped))
    if pipeline := rec.get("input_pipeline"):
        style = "bold yellow" if pipeline["bottleneck"] else ""
        table.add_row("input pipeline", Text(safe(pipeline["text"]), style=style))
    # A trial number, not a count of launched trials: pruned proposals take numbers too.
    table.add_row(
        "trial", f"#{rec['trial_number']} ({view['total_trials']} recorded, pruned included)"
    )
    if unfinished:
        table.add_row("[bold yellow]caution[/]", safe(unfinished))
        return table  # a best so far: export needs --allow-partial, so no commands are offered
    if rejudged:
        # `export` writes the study's stored recommendation, which this is not.
        table.add_row(
            "export",
            f"the study's own recommendation is what export writes; set these knobs by hand, "
            f"or run the study again with --headroom {rejudged['headroom']:g}",
        )
        return table
    return Group(table, export_lines(view["study"]))


def export_lines(study_id: str) -> RenderableType:
    """One line per trainer export: the command and what it prints."""
    from rich.text import Text

    from autotuner.study.export import export_commands

    lines = Text("Apply it to your trainer:\n", style="bold")
    for command, what in export_commands(study_id):
        lines.append(f"  {command}", style="cyan")
        lines.append(f"  # {what}\n", style="dim")
    lines.rstrip()
    return lines


def memory_rows(hr: dict[str, Any]) -> list[tuple[str, str]]:
    """The recommendation's memory side by side: peak, limit, headroom, and its check."""
    peak, limit, head = hr.get("peak_gib"), hr.get("limit_gib"), hr.get("headroom_rel") or 0.0
    if peak is None:
        return []
    if hr.get("peak_kind") != "cuda":
        cap = f" (cap {limit:.1f} GiB)" if limit else ""
        kind = "CPU resident memory" if hr.get("peak_kind") == "cpu_rss" else "kind not reported"
        rows = [
            ("peak memory", f"{peak:.2f} GiB, {kind}{cap}"),
            ("headroom", f"{head:.0%}: applies to GPU memory only, not enforced here"),
        ]
    elif not limit:
        rows = [("peak memory", f"{peak:.2f} GiB (reserved + CUDA context), no limit known")]
    else:
        rows = [
            (
                "peak memory",
                f"{peak:.1f} GiB of {limit:.1f} GiB limit ({hr['free_rel']:.1%} free; "
                "reserved + CUDA context)",
            )
        ]
        spare = hr.get("spare_gib") or 0.0
        if not head:
            rows.append(("headroom", "none asked (--headroom 0)"))
        elif spare >= 0:
            rows.append(("headroom", f"{head:.0%} kept: {spare:.1f} GiB to spare"))
        else:
            rows.append(("headroom", f"{head:.0%} not kept: tight by {-spare:.1f} GiB"))
    from autotuner.search.headroom_words import NOT_CHECKED_OFF, NOT_CHECKED_YET, passed_over_text

    check = hr.get("check")
    if check:
        rows.append(("headroom check", check["text"]))
    elif hr.get("ended_unchecked"):
        # Its budget was spent, or it would have ended past the time budget (`search` says).
        rows.append(("headroom check", "not run: the study ended before it"))
    elif NOT_CHECKED_YET in (hr.get("text") or ""):
        rows.append(("headroom check", "not run yet (at the end of the search)"))
    elif NOT_CHECKED_OFF in (hr.get("text") or ""):
        rows.append(("headroom check", "off (headroom_check=false)"))

    rows += [("passed over", line) for line in passed_over_text(hr.get("passed_over") or [])]
    return rows


def trials_table(study: dict[str, Any], views: list[dict[str, Any]]) -> RenderableType:
    """Every trial of a study: what it tried, what it measured, or why it failed.

    Fits 80 columns: the config shows only the knobs that vary across the study's trials, in
    short forms (`mb=32 bf16 flash compile`); why a trial failed (or what it retried) is listed
    below the table, once for all the trials that share the reason; columns no trial filled are
    left out."""
    from rich import box
    from rich.text import Text

    varying = _varying_knobs(views)
    table = Table(
        title=f"Trials of study {safe(study['id'])} ({safe(study['status'])})",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    has = {key: any(v.get(key) is not None for v in views) for key in ("mfu", "peak_mem_gib")}
    batch = any(v.get("global_batch_tokens") for v in views)
    columns = ["#", "state", "config", "tok/s", "±"]
    columns += ["batch"] * batch + ["MFU"] * has["mfu"] + ["GiB"] * has["peak_mem_gib"]
    rows: list[list[str]] = []
    notes: dict[str, list[int]] = {}
    single = False
    for v in views:
        tps = v["tokens_per_s"]
        spread = spread_text(v).lstrip("±")
        if spread == SINGLE_REPEAT:
            spread, single = "1 rep", True
        label = trial_label(v)
        note = trial_note(v)
        if note:
            notes.setdefault(note, []).append(v["number"])
        row = [
            str(v["number"]),
            safe(label),
            safe(compact_params(v["params"], varying)),
            f"{tps:,.0f}" if tps else "",
            spread,
        ]
        if batch:
            # Tokens per optimizer step: trials that differ here are different training runs.
            row.append(short_tokens(v.get("global_batch_tokens")))
        if has["mfu"]:
            row.append(f"{v['mfu']:.1%}" if v["mfu"] is not None else "")
        if has["peak_mem_gib"]:
            row.append(f"{v['peak_mem_gib']:.2f}" if v["peak_mem_gib"] is not None else "")
        rows.append(row)
    for i, name in enumerate(columns):
        if name == "config":  # the one column that folds onto a second line when space is short
            table.add_column(name, overflow="fold")
            continue
        # Numbers and states are never cut: `24,9…` tok/s is no number at all.
        width = max([len(name), *(len(r[i]) for r in rows)])
        table.add_column(
            name, justify="left" if name == "state" else "right", no_wrap=True, min_width=width
        )
    for row in rows:
        table.add_row(*row)
    lines = [
        Text.from_markup(f"[bold]{_numbers(numbers)}[/] {safe(note)}")
        for note, numbers in notes.items()
    ]
    if single:
        lines.append(
            Text("±: half the repeats' range; 1 rep: one timed repeat, no spread", style="dim")
        )
    if any(v.get("global_batch_tokens") for v in views):
        lines.append(Text("batch: tokens per optimizer step (K = 1024)", style="dim"))
    return Group(table, *lines) if lines else table


def short_tokens(tokens: int | None) -> str:
    """65536 -> 64K, 1572864 -> 1.5M (powers of 1024), 3000 -> 3000: short, and exact."""
    if not tokens:
        return ""
    for unit, size in (("M", 1024**2), ("K", 1024)):
        if tokens >= size and (tokens * 10) % size == 0:
            return f"{tokens / size:g}{unit}"
    return str(tokens)


def trial_note(view: dict[str, Any]) -> str:
    """Why a trial failed or was skipped, once (`oom: ...`, never `dominated: dominated: ...`)."""
    cls, message = view.get("error_class"), (view.get("error_message") or "").strip()
    note = ""
    if cls and trial_label(view) != "cancelled":
        note = message if message.lower().startswith(f"{cls.lower()}:") else f"{cls}: {message}"
        note = note.rstrip(": ")
    if view.get("tight") and view.get("memory_free_rel") is not None:
        note = (
            f"tight: leaves {view['memory_free_rel']:.1%} of the GPU memory free, less than "
            "the study's headroom: not recommended"
        )
    # What a re-run was for (a re-measurement, an end check), said before why it failed: its
    # row repeats a config a row above shows, and would read as a duplicate.
    if purpose_tag(view) and (said := _PURPOSE_NOTES.get(str(view.get("purpose")))):
        note = f"{said}; {note}" if note else said
    if view.get("retry_of") is not None:
        note = f"retry of #{view['retry_of']}" + (f"; {note}" if note else "")
    return note


# Why a trial that is no search proposal ran (labels.PURPOSE_TAGS names it): said once under
# the table for every trial of that purpose, so each row stays one line at 80 columns. A parity
# run's row names the candidate it checks (search/numerics.py) and measures no throughput
# (study/trial_list.py leaves its tokens/s out).
_PURPOSE_NOTES: dict[str, str] = {
    Purpose.EXPERT_DEFAULT: f"{PURPOSE_TAGS[Purpose.EXPERT_DEFAULT]}: the yardstick the "
    "recommendation is compared with",
    Purpose.REMEASURE: f"{PURPOSE_TAGS[Purpose.REMEASURE]}: a top config again in a fresh "
    "process, pooled with its first measurement",
    Purpose.HEADROOM: f"{PURPOSE_TAGS[Purpose.HEADROOM]}: the winner again with an evaluation "
    "pass and a checkpoint save, for its real peak memory",
    Purpose.REFERENCE: f"{PURPOSE_TAGS[Purpose.REFERENCE]}: the best config on one GPU, for the "
    "scaling efficiency",
    Purpose.PROXY: f"{PURPOSE_TAGS[Purpose.PROXY]}: the config on the shallower proxy model "
    "(--proxy-layers)",
    Purpose.PARITY_REFERENCE: "the numerics check's reference: the candidate shown, run at the "
    "reference precision with fp32 AdamW moments, its loss per step; no throughput measured",
    Purpose.PARITY: "the numerics check's parity run of the candidate shown: its loss per step; "
    "no throughput measured",
}


def _numbers(numbers: list[int]) -> str:
    shown = ", ".join(f"#{n}" for n in numbers[:6])
    return shown + (f" and {len(numbers) - 6} more" if len(numbers) > 6 else "")


# Short names for the config column; the values of _BARE knobs name themselves (bf16, flash).
_SHORT_KNOBS = {
    "micro_batch_size": "mb",
    "grad_accum": "ga",
    "vocab_pad_multiple": "pad",
    "allocator": "alloc",
    "compile_scope": "scope",
    "loader_workers": "workers",
    "prefetch_factor": "prefetch",
    "ddp_bucket_cap_mb": "bucket_mb",
    "nccl_min_channels": "nccl_min_ch",
    "nccl_max_channels": "nccl_max_ch",
    "nccl_buffsize": "nccl_buf",
    "grad_compression": "grad_comp",
    "fsdp_reduce_dtype": "reduce",
}
_BARE = {"precision", "attention", "optimizer", "parallel"}


def compact_params(params: dict[str, Any], only: set[str] | None = None) -> str:
    """A trial's knobs in short forms (`mb=32 bf16 flash compile`), limited to `only`."""
    return " ".join(_short(k, v) for k, v in params.items() if only is None or k in only)


def _short(knob: str, value: Any) -> str:
    if knob == "compile_mode":
        return {"none": "eager", "default": "compile"}.get(str(value), f"compile:{value}")
    if knob == "checkpointing":
        return "no-ckpt" if value == "none" else f"ckpt:{value}"
    if knob in _BARE:
        return str(value)
    name = _SHORT_KNOBS.get(knob, knob)
    if isinstance(value, bool):
        return name if value else f"no-{name}"
    return f"{name}={value}"


def _varying_knobs(views: list[dict[str, Any]]) -> set[str] | None:
    """The knobs whose value differs between trials; None (show all) when none does."""
    seen: dict[str, set[str]] = {}
    for v in views:
        for k, val in v["params"].items():
            seen.setdefault(k, set()).add(repr(val))
    varying = {
        k for k, vals in seen.items() if len(vals) > 1 or any(k not in v["params"] for v in views)
    }
    return varying or None


def _best_cell(v: dict[str, Any]) -> str:
    """What a study recommends so far: its value and trial (`381,892 #2`), `-` before any."""
    value = v.get("recommended_value")
    if value is None and v.get("status") in ("queued", "running"):
        return "-"  # the fastest single trial is no recommendation (the dashboard's list agrees)
    value = v.get("best_value") if value is None else value
    number = v["best_trial_number"]
    if number is None:
        return "-"
    return f"{value:,.0f} #{number}" if value else f"#{number}"


def studies_table(views: list[dict[str, Any]], one: bool = False) -> Table:
    """One row per study: its state, trial counts by state with the budget spent under them,
    and what it recommends so far (the objective's value and the trial), when it was created
    (to the minute). `one`: a single study's row, titled with its name."""
    from rich import box
    from rich.text import Text

    title = f"Study {safe(views[0].get('name') or views[0]['id'])}" if one else "Studies"
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    # The id is what every other verb takes: never cut; its creation time under it.
    width = max([16, *(len(safe(v["id"])) for v in views)])
    table.add_column("id, created", no_wrap=True, min_width=width)
    table.add_column("name", overflow="fold")  # a long word folds, never cut
    table.add_column("status", no_wrap=True)
    # One line per state and one for the budget: never cut, so the name is what wraps.
    table.add_column("trials, budget", no_wrap=True)
    bests = [_best_cell(v) for v in views]
    table.add_column("best", justify="right", no_wrap=True, min_width=max([4, *map(len, bests)]))
    for v, best in zip(views, bests, strict=True):
        # One line per state: safe() makes line breaks spaces, so each line is made safe alone.
        counts = "\n".join(f"{n} {safe(k)}" for k, n in sorted(v["trial_counts"].items()))
        created = safe((v["created_at"] or "")[:16].replace("T", " "))
        # A study that waits for its cluster or GPUs says why under its name (study/pause.py).
        name = safe(v["name"])
        if v.get("waiting"):
            name += f"\n[yellow]waiting: {safe(v['waiting'])}[/]"
        table.add_row(
            Text.assemble(safe(v["id"]), "\n", (created, "dim")),
            name,
            safe(v["status"]),
            Text.assemble(counts or "-", "\n", (budget_used(v), "dim")),
            best,
        )
    return table
