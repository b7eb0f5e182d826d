"""Command-line values taken as they are where Typer's own check could not change them.

Typer (0.2x) checks each value a command receives with a pydantic `TypeAdapter` built for its
parameter: the first one imports pydantic, and each is built on first use. A cold
`autotuner best STUDY --db URL` (a text argument, a text option, a float default) spent
50 to 70 ms of its 0.6 s there. A value that already has its parameter's plain type (`str`,
`int`, `float`, no parser of its own) and lies within its `min`/`max` comes out of that check
unchanged, so it is taken as it is. Any other value (a number typed as text, one out of its
bounds, a path, a choice, a list) goes through Typer's own check: what the CLI accepts, and
the messages it refuses with, stay Typer's. `tests/unit/test_cli_plain_values.py` holds the two
to the same answers.
"""

from __future__ import annotations

from typing import Any

PLAIN_TYPES = (str, int, float)


def runtime_param(param: Any) -> Any:
    """`param`'s check (Typer's `get_runtime_param`, which help_names.py's parameter classes
    answer with this): `PlainOrTyper`, built once per parameter."""
    if param._runtime_param is None:
        param._runtime_param = PlainOrTyper(param.type_descriptor)
    return param._runtime_param


def plain_type(descriptor: Any) -> type | None:
    """The parameter's type where a value of exactly that type passes Typer's check unchanged
    (within the bounds, `in_bounds`); None where Typer's check may change or refuse one."""
    annotation = descriptor.annotation
    info = descriptor.parameter_info
    if annotation not in PLAIN_TYPES or info.parser is not None:
        return None
    if descriptor.file_annotation is not None:
        return None
    return annotation


def in_bounds(value: Any, info: Any) -> bool:
    """Within the parameter's `min` and `max`, both inclusive as Typer's (NaN is not)."""
    return (info.min is None or value >= info.min) and (info.max is None or value <= info.max)


class PlainOrTyper:
    """A parameter's check: a plain value as it is, anything else by Typer's."""

    def __init__(self, descriptor: Any) -> None:
        self.descriptor = descriptor
        self.plain = plain_type(descriptor)
        self._typer: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        multi = param.multiple or param.nargs == -1
        if value is None:  # not given, no default: Typer's check answers so before its adapter
            return () if multi else None
        if (
            self.plain is not None
            and not multi
            and type(value) is self.plain
            and (self.plain is str or in_bounds(value, self.descriptor.parameter_info))
        ):
            return value
        return self.typer().coerce(value, param=param, ctx=ctx)

    def typer(self) -> Any:
        """Typer's own check for this parameter (built on first use)."""
        if self._typer is None:
            from typer._coercion import build_runtime_param

            self._typer = build_runtime_param(self.descriptor)
        return self._typer
