"""What the read verbs print: safe for the terminal, readable at 80 columns."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.unit.test_cli_errors import run_cli

# ESC/OSC (window title, hyperlink), CSI (clear screen, colour), a C1 CSI, BEL, Rich markup.
EVIL = "pwn\x1b]0;owned\x07\x1b]8;;http://evil\x1b\\ed\x1b[2J\x1b[31m\x9b1m[bold red]x[/]"


def test_read_verbs_strip_control_bytes_and_rich_markup(finished_study: tuple[str, str]) -> None:
    url, study_id = finished_study
    # Written past the request checks (an older release, or another writer of the database).
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE studies SET name = ?, error_message = ?", (EVIL, EVIL))
        conn.execute("UPDATE trials SET error_message = ? WHERE error_class IS NOT NULL", (EVIL,))
    for args in (["status"], ["status", study_id], ["trials", study_id], ["best", study_id]):
        proc = run_cli(*args, "--db", url, env={"COLUMNS": "200"})
        assert proc.returncode == 0, proc.stderr
        text = proc.stdout + proc.stderr
        assert not any(c in text for c in "\x1b\x07\x9b"), (args, text)
        if args[0] in ("status", "trials"):
            assert "[bold red]x[/]" in text, (args, text)  # markup shown, not obeyed
    missing = run_cli("best", EVIL + "-nope", "--db", url)
    assert missing.returncode == 2 and "\x1b" not in missing.stderr and "\x07" not in missing.stderr


def no_escapes(text: str) -> bool:
    """No byte that starts or ends a terminal escape sequence (ESC, BEL, C1 CSI)."""
    return not any(c in text for c in "\x1b\x07\x9b")


@pytest.mark.parametrize("verb", ["tune", "submit"])
def test_a_new_name_with_control_bytes_is_refused_in_one_clean_line(
    verb: str, tmp_path: Path
) -> None:
    db = tmp_path / "new.db"
    proc = run_cli(verb, "examples/tiny.yaml", "--name", EVIL, "--db", f"sqlite:///{db}")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: --name: contains the control character"), proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and no_escapes(proc.stdout + proc.stderr), proc.stderr
    assert not db.exists()  # refused before anything is written


def test_submit_shows_a_markup_name_as_text(sqlite_url: str) -> None:
    proc = run_cli(
        "submit", "examples/tiny.yaml", "--name", "[bold red]x[/] click", "--db", sqlite_url
    )
    assert proc.returncode == 0, proc.stderr
    # Rich would eat the tags and keep `x click`: the name must read as it was given.
    assert f"({'[bold red]x[/] click'})" in " ".join(proc.stderr.split()), proc.stderr
    assert no_escapes(proc.stdout + proc.stderr), proc.stderr


def test_cancel_by_a_hostile_name(sqlite_url: str) -> None:
    queued = run_cli("submit", "examples/tiny.yaml", "--db", sqlite_url)
    assert queued.returncode == 0, queued.stderr
    study_id = queued.stdout.strip()
    # Written past the request checks, as in the read verbs' test above.
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE studies SET name = ?", (EVIL,))
    cancelled = run_cli("cancel", EVIL, "--db", sqlite_url)  # the name is how it is found
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout == f"study {study_id} cancelled\n", cancelled.stdout
    again = run_cli("cancel", EVIL, "--db", sqlite_url)
    assert again.returncode == 2 and "already cancelled" in again.stderr, again.stderr
    missing = run_cli("cancel", EVIL + "-nope", "--db", sqlite_url)
    assert missing.returncode == 2 and "[bold red]x[/]" in missing.stderr, missing.stderr
    for proc in (cancelled, again, missing):
        assert no_escapes(proc.stdout + proc.stderr), proc.stdout + proc.stderr


def test_best_watch_draws_hostile_texts_as_text(finished_study: tuple[str, str]) -> None:
    """One frame of `best --watch` (the study has ended, so it draws once and exits). The
    recommendation quotes other texts: the numerics entry a failed parity trial's error."""
    url, study_id = finished_study
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        conn.execute(
            "UPDATE studies SET name = ?, recommendation = json_set(recommendation, "
            "'$.numerics.text', ?, '$.stopped', ?)",
            (EVIL, f"bf16: not checked: its parity trial #3 failed (crash: {EVIL})", EVIL),
        )
    proc = run_cli(
        "best", EVIL, "--watch", "--interval", "0.2", "--db", url, env={"COLUMNS": "200"}
    )
    assert proc.returncode == 0, proc.stderr
    assert f"Recommended config: study {study_id}" in proc.stdout, proc.stdout  # found by name
    assert "measured of" in proc.stdout, proc.stdout  # the watch frame's own line
    assert no_escapes(proc.stdout + proc.stderr), proc.stdout
    rows = {line.split("│")[1].strip(): line for line in proc.stdout.splitlines() if "│" in line}
    for row in ("numerics", "search"):
        assert "[bold red]x[/]" in rows[row], proc.stdout  # markup shown, not obeyed


def test_best_of_an_ended_study_without_a_measured_trial_says_so_not_yet() -> None:
    """Llama 8B on one H200 (2026-12-03): every trial out of memory, and `best` said "no
    completed trial yet" of a study that had ended."""
    from rich.console import Console

    from autotuner.cli.render import best_table

    def said(status: str, measured: int = 0) -> str:
        console = Console(width=80, record=True)
        view = {"best": None, "study": "st-8b", "status": status, "total_trials": 13}
        console.print(best_table({**view, "completed_trials": measured}))
        return " ".join(console.export_text().split())

    assert "no completed trial yet (13 trial(s) so far)" in said("running")
    ended = said("completed")
    assert "yet" not in ended and "no trial measured a throughput" in ended
    assert "all 13 failed or were not run" in ended and "autotuner trials st-8b" in ended
    # Measured, but every one tight: the recommendation passes over them all.
    tight = said("completed", measured=3)
    assert "each of the 3 measured trial(s) left less memory free than the headroom" in tight
    assert "lower --headroom" in tight
    # Still running with only tight trials: not "no completed trial yet" of 2 measured ones.
    running = said("running", measured=2)
    assert "no completed trial" not in running, running
    assert "no recommendable trial yet: each of the 2 measured so far" in running, running


def test_best_says_whether_the_headroom_check_ran() -> None:
    """A winner whose headroom check never ran says so in `best`, not only in the JSON: the
    study ended first (its budget spent, or the check would have ended past the time budget),
    or it is still to come."""
    from autotuner.cli.render import memory_rows
    from autotuner.search.headroom_check import NOT_CHECKED_ENDED, NOT_CHECKED_YET, as_ended

    entry = {
        "peak_gib": 10.6,
        "peak_kind": "cuda",
        "limit_gib": 80.0,
        "headroom_rel": 0.1,
        "free_rel": 0.87,
        "spare_gib": 61.4,
        "enforced": True,
        "text": f"peak 10.6 GiB of 80.0 GiB: 86.8% free; {NOT_CHECKED_YET}",
        "check": None,
    }
    running = dict(memory_rows(entry))
    assert running["headroom check"] == "not run yet (at the end of the search)"
    ended = as_ended(entry)
    assert NOT_CHECKED_ENDED in ended["text"] and NOT_CHECKED_YET not in ended["text"]
    assert dict(memory_rows(ended))["headroom check"] == "not run: the study ended before it"
    checked = {**entry, "check": {"text": "passed: 14.1% free"}}
    assert as_ended(checked) == checked
    assert dict(memory_rows(checked))["headroom check"] == "passed: 14.1% free"


def test_compile_scope_and_kernels_read_short_in_the_config_column() -> None:
    from autotuner.cli.render import compact_params

    params = {"compile_mode": "default", "compile_scope": "block", "kernels": "fused-ce"}
    assert compact_params(params) == "compile scope=block kernels=fused-ce"


def _trial(number: int, tps: float | None, low: float | None, high: float | None, **kw: object):
    view: dict[str, object] = {
        "number": number,
        "state": "complete",
        "purpose": "search",
        "params": {"micro_batch_size": 8 * (number + 1), "precision": "bf16"},
        "tokens_per_s": tps,
        "tokens_per_s_min": low,
        "tokens_per_s_max": high,
        "mfu": 0.41,
        "peak_mem_gib": 21.5,
        "global_batch_tokens": 65536,
        "error_class": None,
        "error_message": None,
        "retry_of": None,
        "tight": False,
        "memory_free_rel": 0.3,
    }
    return {**view, **kw}


def test_trials_mark_single_repeats_and_what_a_re_run_was_for() -> None:
    """Issue 42: a single-repeat trial showed "0.0%" of spread as if perfectly precise, and a
    re-measurement or a headroom check read as a duplicate of the row it re-runs."""
    from rich.console import Console

    from autotuner.cli.render import trials_table

    views = [
        _trial(0, 25_000.0, 24_800.0, 25_300.0),
        _trial(1, 31_000.0, 31_000.0, 31_000.0),  # one timed repeat
        _trial(
            2,
            30_500.0,
            30_200.0,
            30_700.0,
            purpose="remeasure",
            params=_trial(1, 0, 0, 0)["params"],
        ),
        _trial(
            3, 30_900.0, 30_600.0, 31_100.0, purpose="headroom", params=_trial(1, 0, 0, 0)["params"]
        ),
    ]
    console = Console(width=80, record=True)
    console.print(trials_table({"id": "st-1", "status": "completed"}, views))
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "0.0%" not in text, text
    row = next(line for line in text.splitlines() if line.lstrip().startswith("1 "))
    assert "1 rep" in row, text
    assert "1 rep: one timed repeat, no spread" in text
    # One line per trial (80 columns); what a re-run was for is said under the table.
    assert sum(1 for line in text.splitlines() if line.lstrip()[:1].isdigit()) == len(views)
    assert "#2 re-measurement: a top config again in a fresh process" in text, text
    assert "#3 headroom check: the winner again with an evaluation pass" in text, text
    assert "1.0%" in text  # a real spread is still shown: (25,300 - 24,800) / 2 / 25,000


def test_the_studies_list_puts_each_trial_state_on_its_own_line_at_80_columns() -> None:
    """The counts column is never cut, so a study's states on one line took the width a
    long study name needed: at 80 columns the name folded two characters a line."""
    from rich.console import Console

    from autotuner.cli.render import studies_table

    view = {
        "id": "st-e7c48c2b",
        "name": "landscape-qwen2.5-1.5b-instruct-0",
        "status": "completed",
        "created_at": "2026-12-07T09:19:00",
        "trial_counts": {"complete": 4, "infeasible": 8, "pruned": 26},
        "trials_launched": 12,
        "minutes_used": 8.0,
        "max_minutes": 8,
        "recommended_value": 48_699.0,
        "best_trial_number": 18,
    }
    console = Console(width=80, record=True)
    console.print(studies_table([view]))
    lines = console.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    for state in ("4 complete", "8 infeasible", "26 pruned"):
        line = next(line for line in lines if state in line)
        assert not any(
            other in line for other in ("complete", "infeasible", "pruned") if other not in state
        ), line
    assert any("landscape-qw" in line for line in lines), lines  # the name keeps its width
