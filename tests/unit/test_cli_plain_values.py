"""cli/plain_values.py takes a plain value as it is where Typer's check would pass it unchanged:
over every parameter of every command, its answers are Typer's own (the value, or the same
refusal), and a read that reaches its verb never builds Typer's pydantic adapters."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest
import typer.main
from typer._click.exceptions import BadParameter
from typer._coercion import build_runtime_param
from typer.core import TyperArgument, TyperOption

from autotuner.cli import app
from autotuner.cli.plain_values import PlainOrTyper
from tests.unit.test_cli_errors import REPO


def _params() -> list[tuple[str, Any, Any]]:
    """(command path, its context, parameter) for every Typer parameter of the app."""
    found = []

    def walk(command: Any, path: tuple[str, ...]) -> None:
        ctx = command.make_context(path[-1] if path else "autotuner", [], resilient_parsing=True)
        for param in command.get_params(ctx):
            if isinstance(param, TyperOption | TyperArgument):
                found.append((" ".join(path), ctx, param))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return found


PARAMS = _params()
# Values of every kind a parameter meets: its default, text as typed, numbers in and out of
# any bounds, the edges themselves, NaN, a bool where a number goes, None.
VALUES: list[Any] = [None, "", "x", "3", "-1", "0.5", 0, 1, 3, -1, 0.0, 0.05, 0.2, 0.9, 0.95]
VALUES += [2.0, -0.5, 1e9, math.nan, True, False]


def _answer(check: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    try:
        result = check.coerce(value, param=param, ctx=ctx)
    except BadParameter as exc:
        return "refused", exc.format_message()
    if isinstance(result, float) and math.isnan(result):
        return "nan", type(result)
    return "value", (type(result), result)


def test_the_parameters_are_found() -> None:
    names = {(path, p.name) for path, _, p in PARAMS}
    assert {
        ("best", "study"),
        ("best", "interval"),
        ("best", "headroom"),
        ("trials", "last"),
    } <= names


@pytest.mark.parametrize(
    ("path", "ctx", "param"), PARAMS, ids=[f"{c} {p.name}" for c, _, p in PARAMS]
)
def test_every_value_is_answered_as_typer_answers_it(path: str, ctx: Any, param: Any) -> None:
    ours = PlainOrTyper(param.type_descriptor)
    typers = build_runtime_param(param.type_descriptor)
    values = [*VALUES, param.default] if param.default is not None else VALUES
    for value in values:
        if param.multiple and isinstance(value, str):
            value = [value]
        assert _answer(ours, value, param, ctx) == _answer(typers, value, param, ctx), (
            f"{path} {param.name}: {value!r}"
        )


def test_the_reads_use_it() -> None:
    # Every parameter help_names.py names (all but an option that names its value itself,
    # `serve --exit-after-raylet-lost SECONDS`); the reads' all of them.
    reads = [p for path, _, p in PARAMS if path in ("best", "trials", "status", "export")]
    assert len(reads) >= 15
    assert all(isinstance(p.get_runtime_param(), PlainOrTyper) for p in reads)


def test_a_read_builds_no_pydantic_adapter() -> None:
    # A server nobody listens on: the read fails after its flags were checked, in its verb.
    read = ["status", "x", "--server", "http://127.0.0.1:9"]
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "autotuner.cli", *read],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2 and "cannot reach the autotuner service" in proc.stderr
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "typer._adapters" not in imported and "pydantic" not in imported
