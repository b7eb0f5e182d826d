"""The `autotuner` app: its verbs, in the order `autotuner --help` lists them, and which
module holds each.

- `tune.py`: `tune`, a whole study in this process; `resume.py`: `resume`, an interrupted one;
- `submit.py`: `submit`; `studies.py`: `best`, `trials`, `status`, `cancel`, `export`; both on
  the service (`--server`) or a local database (`--db`) through `client.py`'s two backends;
- `serve.py`: `serve`, the service; `spaces.py`: `spaces`; `bench.py`: `bench ...`;
- `common.py`: shared flags, error handling, the database; `render.py`: tables and JSON.

Heavy imports (Ray, Optuna, SQLAlchemy) happen inside the commands that need them, and torch is
never imported here at all, so `autotuner --help` and `autotuner best` answer quickly.
"""

from __future__ import annotations

import typer

from autotuner.cli import bench, resume, serve, spaces, studies, submit, tune
from autotuner.cli.help_names import HelpNamedCommand, HelpNamedGroup

app = typer.Typer(
    name="autotuner",
    cls=HelpNamedGroup,
    help=(
        "Find the fastest way to train your LLM on your GPUs.\n\n"
        "Searches micro-batch, accumulation, precision, torch.compile (mode and scope), "
        "attention backend, fused kernels, activation checkpointing, optimizer and NCCL "
        "settings with real, short, honestly "
        "measured trials, and recommends the fastest config with its evidence.\n\n"
        "Start with:  autotuner tune examples/tiny.yaml --space cpu-demo --trials 8"
    ),
    no_args_is_help=True,
    add_completion=False,
    # Markdown: a docstring paragraph reflows to the terminal (rich mode keeps its line breaks).
    rich_markup_mode="markdown",
    pretty_exceptions_enable=False,
)

# In the order `autotuner --help` lists them.
app.command(cls=HelpNamedCommand)(tune.tune)
app.command(cls=HelpNamedCommand)(submit.submit)
app.command(cls=HelpNamedCommand)(studies.best)
app.command(cls=HelpNamedCommand)(studies.trials)
app.command(cls=HelpNamedCommand)(studies.status)
app.command(cls=HelpNamedCommand)(studies.cancel)
app.command(cls=HelpNamedCommand)(resume.resume)
app.command(cls=HelpNamedCommand)(studies.export)
app.command(cls=HelpNamedCommand)(serve.serve)
app.command(cls=HelpNamedCommand)(spaces.spaces)
app.add_typer(bench.app, name="bench")
