"""bench/reads_scale.py's results as a Markdown table per study size, against the targets."""

from __future__ import annotations

from typing import Any

from bench.reads_lib.http_reads import TARGETS_MS


def _load(avg: Any) -> str:
    return " / ".join(f"{x:.1f}" for x in avg)


def _met(value: float, target: float) -> str:
    return "yes" if value < target else f"**no** ({value / target:.1f}x)"


def _row(name: str, r: dict[str, Any], target: float | None, extra: str = "") -> str:
    goal = f"p99 < {target:,.0f}" if target is not None else ""
    met = _met(r["p99"], target) if target is not None else ""
    return f"| {name} | {r['p50']} | {r['p95']} | {r['p99']} | {goal} | {extra} | {met} |"


def only_rows(results: dict[str, Any]) -> str:
    """The rows of `--only`'s reads, per study size, with the command and the load."""
    lines = [f"Command: `{results['command']}` ({results['when']}, {results['machine']})", ""]
    for run in results["runs"]:
        lines += [
            f"{run['trials']:,} trials, load average before / after: "
            f"{_load(run['load_before'])} / {_load(run['load_after'])}",
            "",
            "| read | p50 ms | p95 ms | p99 ms | target | bytes (gzip) | met |",
            "| --- | ---: | ---: | ---: | --- | ---: | --- |",
        ]
        for name, r in run.get("http", {}).items():
            extra = f"{r['bytes']:,} ({r['bytes_gzip']:,})" + _first(r)
            lines.append(_row(name, r, TARGETS_MS[r["kind"]], extra))
        if "browser" in run:
            lines.append(_browser_row(run["browser"]))
        coordinator = run.get("coordinator", {})
        if "store_live_best_ms" in coordinator:
            lines += _live_rows(coordinator)
        if "end_of_study_ms" in coordinator:
            lines += _end_rows(coordinator)
        for name, r in run.get("cli", {}).items():
            lines.append(
                _row(f"{name}, cold process", r, TARGETS_MS["cli"], f"{r['stdout_lines']} lines")
            )
        lines.append("")
    return "\n".join(lines)


def _first(r: dict[str, Any]) -> str:
    # The service's first read of the page (as JSON) computes the charts it keeps
    # (dashboard/charts_kept.py): what the first visitor after a start waits.
    if r.get("first_ms") is None:
        return ""
    return f"; the service's first read of the page: {r['first_ms']:,.0f} ms"


def _browser_row(b: dict[str, Any]) -> str:
    if "ready_ms" in b:
        return _row("study page in Chromium: navigation to all drawn", b["ready_ms"], 2000)
    return f"| study page in Chromium | {b} | | | | | |"


def run_table(run: dict[str, Any]) -> list[str]:
    n, seed = run["trials"], run["seed"]
    lines = [
        f"## {n:,} trials",
        "",
        f"Seeded: one study of {n:,} finished trials (+2 running) and {seed['small']} studies "
        "of 50 "
        f"(big: {seed['seed_big_s']} s, small: {seed['seed_small_s']} s), then VACUUM ANALYZE "
        f"({seed['vacuum_analyze_s']} s). Load average (1, 5, 15 min) before: "
        f"{_load(run['load_before'])}, after: {_load(run['load_after'])}.",
        "",
        "| read | p50 ms | p95 ms | p99 ms | target | bytes (gzip) | met |",
        "| --- | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    for name, r in run["http"].items():
        extra = f"{r['bytes']:,} ({r['bytes_gzip']:,})"
        if "rows" in r:
            paged = "a page" if not r["all_rows"] else "**every row**"
            extra += f"; {r['rows']:,} rows: {paged}" + ("; next link" if r.get("next") else "")
        lines.append(_row(name, r, TARGETS_MS[r["kind"]], extra + _first(r)))
    lines.append(_browser_row(run["browser"]))
    p = run["polling"]
    lines.append(
        _row(
            f"{p['clients']} clients polling best / the study view every {p['interval_s']:g} s "
            f"for {p['seconds']:g} s while a writer finishes trials",
            p["ms"],
            TARGETS_MS["poll"],
            f"{p['requests']:,} requests, {p['trials_written']} trials written",
        )
    )
    for name, r in run["cli"].items():
        lines.append(
            _row(f"{name}, cold process", r, TARGETS_MS["cli"], f"{r['stdout_lines']} lines")
        )
    c = run["coordinator"]
    return lines + _live_rows(c) + _end_rows(c)


def _live_rows(c: dict[str, Any]) -> list[str]:
    lines = [
        _row(
            "coordinator: store the live recommendation after a finished trial (20 trials)",
            c["store_live_best_ms"],
            None,
            f"the trial's own two writes: p50 {c['trial_writes_ms']['p50']} ms; "
            f"{c.get('full_computations', '?')} of the 20 computed from every trial",
        )
    ]
    if "full_recomputation_ms" in c:
        lines.append(
            f"| for reference: the recommendation from every trial, stored (once) | "
            f"{c['full_recomputation_ms']} | | | | | |"
        )
    return lines


def _end_rows(c: dict[str, Any]) -> list[str]:
    end = c["end_of_study_ms"]
    return [
        f"| coordinator: end of study (read, recommend, knob report, the policy's evidence, "
        f"store) | {end} | | | < {TARGETS_MS['end']:,.0f} | CPU {c['end_of_study_cpu_ms']} ms "
        f"| {_met(end, TARGETS_MS['end'])} |",
        f"| of which the evidence (policy.report: the models replayed) | "
        f"{c['end_of_study_evidence_ms']} | | | | | |",
        *(
            [
                f"| before it, during the study: the evidence's replay fed the ended trials "
                f"({c['evidence_catch_up_feeds']} feeds of up to 500, as a coordinator taking "
                f"over the whole study would) | {c['evidence_catch_up_ms']} | | | | | |"
            ]
            if "evidence_catch_up_ms" in c
            else []
        ),
    ]


def report(results: dict[str, Any]) -> str:
    lines = [
        "# Reads at scale (issues 16 and 42)",
        "",
        f"{results['when']} · {results['machine']} · PostgreSQL {results['postgres']} "
        f"(autovacuum {results['autovacuum']}) · up to {results['repeats']} calls per read "
        "(fewer where a read passed 30 s in all), gzip",
        "",
        f"Command: `{results['command']}`",
        "",
    ]
    for run in results["runs"]:
        lines += [*run_table(run), ""]
    lines += [
        "The CLI rows are wall times of a fresh `python -m autotuner.cli` process each, output "
        "to a pipe. The machine is shared (2 cores): other work ran beside it (load above).",
    ]
    return "\n".join(lines) + "\n"
