"""What the read verbs print: safe for the terminal, readable at 80 columns."""

from __future__ import annotations

import sqlite3

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
