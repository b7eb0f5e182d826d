"""The `autotuner` command line: `main` runs it; `app` (cli/commands.py) is its Typer app.

This package imports nothing itself, so `main` can turn off the cyclic garbage collector
before the app and its verbs are imported (see `main`).
"""

from __future__ import annotations

from typing import Any


def main() -> None:
    """Run the CLI. The imports (Typer, Rich, pydantic, and for a read of a local database
    SQLAlchemy and the models) create a few hundred thousand objects that live as long as the
    process; with the collector on, each of its passes during the imports walked them again
    (about a tenth of a cold `autotuner status`). They are imported with it off, then frozen
    out of its reach; it runs again for the verbs that run on (`tune`, `serve`), and the reads
    turn it off for good (common.short_lived)."""
    import gc

    from autotuner.cli.signals import catch_ctrl_c

    catch_ctrl_c()  # before the imports: a Ctrl-C during them is kept for the run
    gc.disable()
    from autotuner.cli.commands import app

    gc.freeze()
    gc.enable()
    app()


def __getattr__(name: str) -> Any:
    # `from autotuner.cli import app` (tests, bench): the app, imported on first use.
    if name == "app":
        from autotuner.cli.commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
