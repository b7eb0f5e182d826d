"""The report: acceptance checks, notes and the Markdown rendering of a benchmark document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotuner.spec import (
    FailureClass,
    TrialResult,
)
from bench.replay_lib.run import WITHIN


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        f"# Replay benchmark: {Path(doc['landscape']).name}",
        "",
        f"Command: `{doc['command']}`",
        "",
        f"Landscape recorded on: {doc['hardware']}. Model: {doc['model']}. Space: "
        f"{doc['space']['name']} ({len(doc['space']['knobs'])} knobs, grid of "
        f"{doc['grid_size']}, {doc['universe_size']} recorded). Best recorded: "
        f"{doc['best']['tokens_per_s']:,.0f} tokens/s with {doc['best']['params']}.",
        f"Seeds: {doc['seeds']}; {_budget(doc)}. Replayed on: {doc['ran_on']} at {doc['ran_at']}.",
        "",
        "Trials and simulated GPU-seconds until the best config found is within 2% of the "
        "landscape's best (a run that never gets there counts as infinite: see hit rate).",
        "",
        "| strategy | hit rate | trials median | trials p90 | GPU-s median | GPU-s p90 | OOMs "
        "per run (before 2%) | impossible launched (all runs) | predicted-OOM precision / "
        "recall |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, s in doc["strategies"].items():
        p = s["predicted_oom"]
        pr = (
            f"{_fmt(p['precision'])} / {_fmt(p['recall'])} (tp {p['tp']}, fp {p['fp']}, "
            f"fn {p['fn']})"
            if name.startswith("ours")
            else "-"
        )
        lines.append(
            f"| {name} | {s['hit_rate']:.0%} | {_fmt(s['trials_to_2pct']['median'])} | "
            f"{_fmt(s['trials_to_2pct']['p90'])} | {_fmt(s['gpu_s_to_2pct']['median'])} | "
            f"{_fmt(s['gpu_s_to_2pct']['p90'])} | {s['ooms_launched_mean']:.1f} "
            f"({s['ooms_before_2pct_mean']:.1f}) | "
            f"{s['impossible_launched_total']} | {pr} |"
        )
    if doc.get("minutes") is not None:
        lines += _time_budget_table(doc)
    acc = doc["acceptance"]
    lines += ["", "Acceptance:", ""]
    lines += [f"- {'PASS' if ok else 'FAIL'}: {text}" for text, ok in acc]
    if doc.get("notes"):
        lines += ["", "Notes:", ""] + [f"- {n}" for n in doc["notes"]]
    off = doc["cost_model_offline"]
    lines += [
        "",
        f"Cost model against every recorded config ({off['configs']} with a peak or an OOM, "
        f"limit {_fmt(off['limit_gib'])} GiB, pruning at mean - {off['z']} sd):",
        "",
        "| model | predicted-OOM precision | recall | tp/fp/fn/tn | median abs error of peak |",
        "| --- | --- | --- | --- | --- |",
    ]
    for mode in ("uncalibrated", "leave_one_out"):
        m = off[mode]
        lines.append(
            f"| {mode} | {_fmt(m['precision'])} | {_fmt(m['recall'])} | "
            f"{m['tp']}/{m['fp']}/{m['fn']}/{m['tn']} | {_fmt(m['median_abs_rel_error_peak'])} |"
        )
    return "\n".join(lines) + "\n"


def _budget(doc: dict[str, Any]) -> str:
    if doc.get("minutes") is None:
        return f"trial budget per run: {doc['budget']}"
    return f"time budget per run: {doc['minutes']:g} minutes of simulated time, no trial budget"


def _time_budget_table(doc: dict[str, Any]) -> list[str]:
    lines = [
        "",
        f"What each {doc['minutes']:g}-minute study recommended, on simulated time (each trial "
        "advances the clock by its recorded wall; a re-run by the study's own end-time "
        "estimate, its compile warm: bench/replay_lib/simtime.py):",
        "",
        "| strategy | recommended, share of the best: median (lowest) | runs within 3% | search "
        "trials median | distinct configs measured, median | runs measuring another micro-batch "
        "than the expert default's | simulated minutes: median (longest) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, s in doc["strategies"].items():
        t = s["time_budget"]
        lines.append(
            f"| {name} | {t['recommended_rel_median']:.1%} ({t['recommended_rel_min']:.1%}) | "
            f"{t['within_3pct']}/{s['runs']} | {_fmt(t['search_trials_median'])} | "
            f"{_fmt(t.get('distinct_configs_median'))} | {t.get('other_micro_batch', '-')}"
            f"/{s['runs']} | {t['minutes_median']:.1f} ({t['minutes_max']:.1f}) |"
        )
    return lines


def _fmt(x: Any) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.3g}" if isinstance(x, float) else str(x)


def floor(table: dict[str, TrialResult], best: float) -> dict[str, Any]:
    """What the cheapest possible search pays: one trial, the cheapest recorded config within
    2% of the best (its recorded wall, compile included). A search that runs the expert
    default before it pays at least that trial's wall more."""
    within = [
        r.wall_s
        for r in table.values()
        if r.tokens_per_s and r.tokens_per_s >= (1 - WITHIN) * best and r.wall_s
    ]
    return {"gpu_s": round(min(within), 1) if within else None, "configs_within": len(within)}


def notes(doc: dict[str, Any], table: dict[str, TrialResult]) -> list[str]:
    out = []
    low, rnd = doc.get("floor", {}).get("gpu_s"), doc["strategies"].get("random")
    rnd_s = rnd["gpu_s_to_2pct"]["median"] if rnd else None
    if low and rnd_s:
        out.append(
            f"Floor: the cheapest of the {doc['floor']['configs_within']} config(s) within 2% "
            f"of the best took {low:,.0f} GPU-s (compile included), {low / rnd_s:.2f} of random "
            "search's median: no search can do better than that share on this recording, one "
            "that runs the expert default before it not even that."
        )
    orders, ours = doc.get("random_orders"), doc["strategies"].get("ours")
    ours_s = ours["gpu_s_to_2pct"]["median"] if ours else None
    if orders and ours_s and orders["median_gpu_s"]:
        runs = doc["seeds"]
        p10, p90 = orders.get(f"median_of_{runs}_p10"), orders.get(f"median_of_{runs}_p90")
        out.append(
            f"Random search's median over {orders['draws']:,} drawn orders of the recorded "
            f"configs (bench/replay_lib/random_orders.py): {orders['median_gpu_s']:,.0f} "
            f"GPU-s, of which ours is {ours_s / orders['median_gpu_s']:.2f}; a median of {runs} "
            f"random runs lies between {p10:,.0f} and {p90:,.0f} GPU-s (10th-90th percentile), "
            "so the ratio against the runs above carries that noise."
        )
    if doc["universe_size"] < doc["grid_size"]:
        out.append(
            f"The recording holds {doc['universe_size']} configs of a {doc['grid_size']}-config "
            "grid: every proposal (seeds included) becomes the nearest recorded config not yet "
            "measured (ties in a random order drawn per run), and random search draws uniformly "
            "from the recorded configs not yet measured (docs/landscape-format.md)."
        )
    if not any(r.failure_class == FailureClass.OOM for r in table.values()):
        out.append(
            "No recorded config ran out of memory, so predicted-OOM precision and recall cannot "
            "be measured on this recording (tests/search measure them on a fake GPU)."
        )
    if "ours-noseed" in doc["strategies"]:
        out.append(
            "ours' first trials are the expert default (bf16, fused attention, compile default, "
            "the largest micro-batch the cost model says fits) and its fastest predicted "
            "alternative, that one first where the prior expects it 1.15x the expert's speed "
            "and the study has no time budget (search/seeding.py FIRST_IF_FASTER); "
            "ours-noseed is the same search "
            "without any seed, to show what the rules, the cost model and TPE do on their own."
        )
    return out


# Issue 10's targets, with and without --drop-best: within 2% of the best in a median of at most
# 6 full-size trials, at no more than 1/4 of random search's GPU-seconds (compile charged).
# Until 2026-12-02 this report checked an earlier issue's 8 trials and 1/3, and said PASS
# where issue 10 does not (GPT-2 with --drop-best 1: 0.27 of random's GPU-seconds).
TRIALS_TARGET = 6
GPU_S_SHARE_TARGET = 0.25


def acceptance(doc: dict[str, Any]) -> list[tuple[str, bool]]:
    ours, rnd = doc["strategies"].get("ours"), doc["strategies"].get("random")
    out = []
    if ours:
        med = ours["trials_to_2pct"]["median"]
        out.append(
            (
                f"ours: median trials to within 2% = {_fmt(med)} (target <= {TRIALS_TARGET})",
                med is not None and med <= TRIALS_TARGET,
            )
        )
        out.append(
            (
                f"ours: impossible configs launched = {ours['impossible_launched_total']} "
                "(target 0)",
                ours["impossible_launched_total"] == 0,
            )
        )
    if ours and rnd:
        a, b = ours["gpu_s_to_2pct"]["median"], rnd["gpu_s_to_2pct"]["median"]
        ok = a is not None and (b is None or a <= b * GPU_S_SHARE_TARGET)
        share = "n/a"
        if a is not None and b:
            # Two digits, or three where two would read as the other verdict (0.2547: "0.25").
            digits = 2 if (round(a / b, 2) <= GPU_S_SHARE_TARGET) == ok else 3
            share = f"{a / b:.{digits}f}"
        out.append(
            (
                f"ours: median GPU-s {_fmt(a)} vs random {_fmt(b)}, {share} of it "
                f"(target <= {GPU_S_SHARE_TARGET:g})",
                ok,
            )
        )
    if ours and "time_budget" in ours:
        t = ours["time_budget"]
        out.append(
            (
                f"ours: a {doc['minutes']:g}-minute study recommends within 3% of the best in "
                f"{t['within_3pct']} of {ours['runs']} runs (target: all)",
                t["within_3pct"] == ours["runs"],
            )
        )
    out.append(
        (f"landscape has >= 60 configs ({doc['universe_size']})", doc["universe_size"] >= 60)
    )
    return out
