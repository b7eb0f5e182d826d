"""`--help` as a person reads it at 80 columns: each option shows the name of the value it takes
(`--db URL`), not Typer's type labels (`<str>`, `<float range>`), and a flag shows nothing after
it (autotuner/cli/help_names.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer.main
from typer.core import TyperOption

from autotuner.cli import app
from autotuner.cli.help_names import VALUE_NAMES
from tests.unit.test_cli_errors import run_cli


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command and group, by its path of names (the top-level group's is empty)."""
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found += _commands(sub, (*path, name))
    return found


COMMANDS = _commands(typer.main.get_command(app))


def test_every_option_has_a_value_name_and_every_name_is_used() -> None:
    used = set()
    for path, command in COMMANDS:
        ctx = command.make_context(path[-1] if path else "autotuner", [], resilient_parsing=True)
        for param in command.get_params(ctx):
            if not isinstance(param, TyperOption):
                continue
            where = f"{' '.join(path)} --{param.name}"
            if param.is_flag:
                assert param.metavar == "", where
            else:
                assert param.metavar, f"{where}: give it a name in help_names.VALUE_NAMES"
                used.add(param.name)
    assert set(VALUE_NAMES) <= used, f"names of no option: {set(VALUE_NAMES) - used}"


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=lambda p: " ".join(p) or "-")
def test_help_at_80_columns_names_values_not_types(path: tuple[str, ...]) -> None:
    proc = run_cli(*path, "--help", env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, proc.stdout
    assert "…" not in proc.stdout, proc.stdout  # no help text cut to fit
    panel = "\n".join(lines[next(i for i, x in enumerate(lines) if "Options" in x) :])
    assert not re.search(r"<(str|bool|int|float|path)[^>]*>", panel), panel
