"""`autotuner submit`, `status`, `best`, `trials`, `cancel`, `export`: studies kept elsewhere.

Each verb works on the service (`--server`) or a database opened here (`--db`) through the
same `cli/client.py` backend interface, and prints its view with `cli/render.py`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autotuner.cli.common import (
    DbOption,
    JsonFlag,
    ServerOption,
    StudyArg,
    backend,
    err,
    friendly_errors,
    out,
    safe,
    short_lived,
)
from autotuner.cli.render import (
    best_table,
    print_json,
    show_best,
    studies_table,
    trials_table,
)
from autotuner.status import STOPPED_STATUSES

if TYPE_CHECKING:
    from autotuner.cli.client import Backend


@friendly_errors
def best(
    study: StudyArg,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Keep redrawing as trials land, until it ends.")
    ] = False,
    interval: Annotated[
        float, typer.Option(min=0.2, help="Seconds between redraws with --watch.")
    ] = 2.0,
    headroom: Annotated[
        float | None,
        typer.Option(
            "--headroom",
            min=0.0,
            max=0.9,
            help="Re-judge the measured trials at this memory headroom instead of the "
            "study's, without running anything (0.05: keep 5% free). For a study whose every "
            "trial was tight; nothing is stored.",
        ),
    ] = None,
    server: ServerOption = None,
    db: DbOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Show the best config so far: tokens/s with its spread, MFU, memory.

    The recommended config with the evidence behind it: its measurements, the margin over the
    runner-up and over the expert default, the numerics and headroom checks, peak memory."""
    if not watch:
        short_lived()
    source = backend(server, db)
    if not watch:
        view = source.best(study, headroom)
        show_best(view, as_json)
        _exit_if_failed(view)
        return
    if headroom is not None:
        raise typer.BadParameter(
            "re-judge an ended study, not one being watched", param_hint="--headroom"
        )
    try:
        if as_json:
            _watch_json(source, study, interval)
        else:
            _watch_table(source, study, interval)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
    _exit_if_failed(source.best(study))


def _exit_if_failed(view: dict[str, Any]) -> None:
    """A failed study has no recommendation to act on: exit status 1, for scripts (its
    reason is in what was printed: the note, or `error_message` in the JSON)."""
    if view["status"] == "failed":
        raise typer.Exit(1)


def _watch_json(source: Backend, study: str, interval: float) -> None:
    """One JSON line per change (for scripts), until the study ends."""
    import time

    last = None
    while True:
        view = source.best(study)
        line = json.dumps(view, default=str, sort_keys=True)
        if line != last:
            print(line, flush=True)
            last = line
        if view["status"] in STOPPED_STATUSES:
            return
        time.sleep(interval)


def _watch_table(source: Backend, study: str, interval: float) -> None:
    import time

    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    def frame(view: dict[str, Any]) -> Any:
        stamp = time.strftime("%H:%M:%S")
        line = (
            f"{safe(view['status'])}: {view['completed_trials']} measured of "
            f"{view['total_trials']} "
            f"trial(s); updated {stamp}"
            + (
                ""
                if view["status"] in STOPPED_STATUSES
                else f", every {interval:g} s (Ctrl-C to stop)"
            )
        )
        return Group(best_table(view), Text(line, style="dim"))

    view = source.best(study)
    with Live(frame(view), console=out, auto_refresh=False) as live:
        while view["status"] not in STOPPED_STATUSES:
            time.sleep(interval)
            view = source.best(study)
            live.update(frame(view), refresh=True)


# The trials `trials` shows without --last: a table of 50 (Rich draws a row in about 1.5 ms,
# several lines each at 80 columns: 200 rows took 0.3 s, most of a cold read); a script's JSON
# gets the last 200.
TABLE_LAST = 50
JSON_LAST = 200


@friendly_errors
def trials(
    study: StudyArg,
    last: Annotated[
        int | None,
        typer.Option(
            "--last",
            "-l",
            min=1,
            help=f"Show the most recent N trials. Default: {TABLE_LAST} in the table, "
            f"{JSON_LAST} with --json.",
            show_default=False,
        ),
    ] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Show every trial.")] = False,
    server: ServerOption = None,
    db: DbOption = None,
    as_json: JsonFlag = False,
) -> None:
    """List a study's trials: what each measured or why it failed.

    The most recent 50 (200 with --json) unless --last N or --all."""
    short_lived()
    if last is None:
        last = JSON_LAST if as_json else TABLE_LAST
    view, total, views = backend(server, db).last_trials(study, None if show_all else last)
    if as_json:
        print_json(views)
        return
    out.print(trials_table(view, views))
    if not show_all and total > last:
        err.print(
            f"the last {len(views)} of {total} trials; --all for every one, --last N for more",
            style="dim",
        )


@friendly_errors
def status(
    study: Annotated[
        str | None, typer.Argument(help="A study; omit to list recent studies.")
    ] = None,
    server: ServerOption = None,
    db: DbOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Show one study's progress, or list recent studies."""
    short_lived()
    source = backend(server, db)
    views = [source.study(study)] if study else source.studies(limit=50)
    if as_json:
        print_json(views[0] if study else views)
        return
    out.print(studies_table(views, one=study is not None))
    if study and views[0]["status"] == "interrupted":
        # Not an error: stopped by its user or a drain, and not over.
        err.print(
            f"{safe(views[0].get('error_message') or 'interrupted')}; continue it with: "
            f"autotuner resume {safe(views[0]['id'])}",
            highlight=False,
            soft_wrap=True,
        )
    elif study and views[0].get("error_message"):
        err.print(f"error: {safe(views[0]['error_message'])}", highlight=False, soft_wrap=True)


@friendly_errors
def cancel(
    study: StudyArg,
    server: ServerOption = None,
    db: DbOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Cancel a queued or running study; its running trials are stopped."""
    view = backend(server, db).cancel(study)
    if as_json:
        print_json(view)
    else:
        out.print(f"study {safe(view['id'])} cancelled", highlight=False)


@friendly_errors
def export(
    study: StudyArg,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="hf (Hugging Face TrainingArguments), lightning (Trainer), torchtitan (TOML), "
            "accelerate (config YAML), pytorch (snippet), env (NCCL and allocator environment), "
            "json, yaml, "
            "or torchrun (a script that re-runs the winning trial with this repo's runner).",
        ),
    ] = "json",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite the --output file if it exists.")
    ] = False,
    allow_partial: Annotated[
        bool,
        typer.Option(
            "--allow-partial",
            help="Export a cancelled or failed study's best so far (marked as partial).",
        ),
    ] = False,
    server: ServerOption = None,
    db: DbOption = None,
) -> None:
    """Write the recommended config in a form you can use.

    A study that was cancelled or failed has no recommendation, only a best so far: export it
    with --allow-partial (the output says so); without it the command exits 2."""
    from autotuner.inputs import UserError
    from autotuner.study.export import FORMATS

    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    short_lived()
    if output is not None:
        _check_output(output, force, fmt)  # before asking for anything
    text = backend(server, db).export(study, fmt, allow_partial)
    if output is None:
        sys.stdout.write(text)
        return
    try:
        with output.open("w" if force else "x") as f:
            f.write(text)
        if fmt == "torchrun":
            output.chmod(0o755)
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc.strerror or exc}") from None
    err.print(f"wrote {safe(output)}", highlight=False)


def _check_output(output: Path, force: bool, fmt: str) -> None:
    import os

    from autotuner.inputs import UserError
    from autotuner.study.export import FORMATS_TABLE

    suffix = FORMATS_TABLE[fmt].suffix
    if output.is_dir():
        raise UserError(
            f"-o {output} is a folder; give a file in it, e.g. -o {output / f'best.{suffix}'}"
        )
    folder = output.parent
    if not folder.is_dir():
        raise UserError(f"-o {output}: the folder {folder} does not exist; create it first")
    if output.exists() and not force:
        raise UserError(f"-o {output} exists; add --force to overwrite it, or pick another name")
    target = output if output.exists() else folder
    if not os.access(target, os.W_OK):
        raise UserError(f"-o {output}: permission denied on {target}; pick a writable path")
