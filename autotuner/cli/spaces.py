"""`autotuner spaces`: the built-in search spaces, to pick one for `--space`."""

from __future__ import annotations

from rich.table import Table

from autotuner.cli.common import out


def spaces() -> None:
    """List the built-in search spaces."""
    from autotuner.search.space import builtin_space_names, load_space

    table = Table(title="Built-in search spaces (use with --space NAME)")
    table.add_column("name", style="bold")
    table.add_column("configs", justify="right")
    table.add_column("description")
    for n in builtin_space_names():
        sp = load_space(n)
        size = sp.size()
        table.add_row(n, f"{size:,}" if size else "large", sp.description)
    out.print(table)
