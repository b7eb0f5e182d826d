"""How options read in `--help`: a short name for the value each takes (`--db URL`,
`--minutes MIN`) in place of Typer's type labels (`<str>`, `<float range>`), and nothing after a
flag (Typer 0.2x labels a flag `<bool>`). Those labels filled the middle column of every help
panel, so at 80 columns the help text had 25 characters a line; with these it has 35.

Every command is registered with `cls=HelpNamedCommand`, every group made with
`cls=HelpNamedGroup`; `tests/unit/test_cli_help.py` checks
that every option that takes a value has a name here, so a new one gets one.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from autotuner.cli.plain_values import runtime_param

# By the option's parameter name.
VALUE_NAMES = {
    "budget": "N",
    "coordinator_id": "ID",
    "data": "PATH",
    "data_dir": "DIR",
    "db": "URL",
    "drop_best": "N",
    "executor": "KIND",
    "factory_dir": "DIR",
    "fmt": "FORMAT",
    "global_batch": "TOKENS",
    "gpus": "N",
    "headroom": "SHARE",
    "heartbeat_interval": "S",
    "host": "HOST",
    "interval": "S",
    "landscape": "FILE",
    "last": "N",
    "lease_ttl": "S",
    "log_level": "LEVEL",
    "max_mem_gib": "GIB",
    "minutes": "MIN",
    "model": "PRESET",
    "name": "TEXT",
    "note": "TEXT",
    "objective": "NAME",
    "option": "KEY=VALUE",
    "out": "DIR",
    "output": "FILE",
    "planned_hours": "HOURS",
    "planned_tokens": "TOKENS",
    "port": "PORT",
    "proxy_layers": "N",
    "ray_address": "ADDRESS",
    "sampler": "NAME",
    "seed": "N",
    "seeds": "N",
    "server": "URL",
    "space": "NAME|FILE",
    "strategies": "LIST",
    "tokenizer": "PATH",
    "trials": "N",
    "usd_per_gpu_hour": "USD",
}


def name_values(params: list[Any]) -> list[Any]:
    """`params` with their help names set: an option the name of its value, a flag none, an
    argument its name in capitals (`tune SPEC`, not `tune {spec}` with a `<str>` beside it)."""
    for param in params:
        if isinstance(param, TyperOption) and param.metavar is None:
            param.metavar = "" if param.is_flag else VALUE_NAMES.get(param.name or "")
            # Typer builds its own parameters: the help's display is changed on each (its
            # class), its parsing is Typer's own and its checks are Typer's but for a plain
            # value (cli/plain_values.py).
            param.__class__ = _UnrangedOption
        elif isinstance(param, TyperArgument) and param.metavar is None:
            param.metavar = (param.name or "").upper()
            param.__class__ = _UntypedArgument
    return params


class _UnrangedOption(TyperOption):
    """No `[x>=0.0]` after the value's name: it took 6 more characters from every line of help
    text at 80 columns, and said less than the text does (`--headroom`: 0 to 0.9). The bound is
    still checked, a value out of it refused in one line."""

    def _get_number_range_help_str(self) -> str | None:
        return None

    def get_runtime_param(self) -> Any:
        return runtime_param(self)


class _UntypedArgument(TyperArgument):
    """An argument named in capitals, without `<str>` beside it (what options do too)."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def get_runtime_param(self) -> Any:
        return runtime_param(self)


class HelpNamedCommand(TyperCommand):
    """A Typer command whose options show the names above in its help."""

    def get_params(self, ctx: Any) -> list[Any]:
        return name_values(super().get_params(ctx))


class HelpNamedGroup(TyperGroup):
    """The same for a group's own options (`autotuner --help`)."""

    def get_params(self, ctx: Any) -> list[Any]:
        return name_values(super().get_params(ctx))
