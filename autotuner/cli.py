"""The `autotuner` command line.

Heavy imports (Ray, Optuna, SQLAlchemy) happen inside the commands that need them, and torch is
never imported here at all, so `autotuner --help` and `autotuner best` answer quickly.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    name="autotuner",
    help=(
        "Find the fastest way to train your LLM on your GPUs.\n\n"
        "Searches micro-batch, accumulation, precision, torch.compile, attention backend, "
        "activation checkpointing, optimizer and NCCL settings with real, short, honestly "
        "measured trials, and recommends the fastest config with its evidence.\n\n"
        "Start with:  autotuner tune examples/tiny.yaml --space cpu-demo --trials 8"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="AUTOTUNER_DATABASE_URL",
        help="Database URL (postgresql+psycopg://user@host/db or sqlite:///path). "
        "Default: a SQLite file in your user data folder.",
        show_default=False,
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of tables.")]


def friendly_errors(fn: F) -> F:
    """Turn the errors a user can fix into one clear line and exit code 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from autotuner.inputs import UserError
        from autotuner.storage.repository import StudyNotFound
        from autotuner.storage.session import DatabaseUnavailable

        try:
            return fn(*args, **kwargs)
        except (UserError, DatabaseUnavailable, StudyNotFound) as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def _open_db(db_url: str | None, *, migrate: bool) -> Any:
    from autotuner.storage.session import Database, resolve_database_url

    url = resolve_database_url(db_url)
    db = Database(url)
    db.check()
    if migrate:
        from autotuner.storage.session import upgrade_database

        upgrade_database(url)
    return db


# --------------------------------------------------------------------------- tune


@app.command()
@friendly_errors
def tune(
    spec: Annotated[
        str, typer.Argument(help="Model spec: a YAML/JSON file, or a preset name like gpt2-124m.")
    ],
    space: Annotated[
        str, typer.Option("--space", "-s", help="Search space: a built-in name or a YAML file.")
    ] = "single-gpu-quick",
    trials: Annotated[
        int | None, typer.Option("--trials", "-n", min=1, help="Stop after this many trials.")
    ] = None,
    minutes: Annotated[
        float | None, typer.Option("--minutes", "-m", min=0.1, help="Stop launching after this.")
    ] = None,
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs per trial.")] = 1,
    objective: Annotated[
        str, typer.Option(help="tokens_per_s, tokens_per_s_per_gpu or mtokens_per_usd.")
    ] = "tokens_per_s",
    sampler: Annotated[str, typer.Option(help="tpe (default), random, grid or gp.")] = "tpe",
    seed: Annotated[int, typer.Option(help="Sampler seed (same seed, same proposals).")] = 0,
    name: Annotated[str | None, typer.Option(help="A name for the study.")] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address", envvar="RAY_ADDRESS", help="Existing Ray cluster; default: local."
        ),
    ] = None,
    db: DbOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Run a whole study here: search, measure, store, and print the recommended config.

    Uses a local Ray (started on demand, or --ray-address) and a SQLite file unless --db says
    otherwise. Without a GPU, trials run a small model on the CPU through the same code path.
    """
    from autotuner.inputs import UserError, load_model_spec
    from autotuner.objective import Objective
    from autotuner.search import SAMPLERS
    from autotuner.space import load_space

    # Validate everything before anything is written.
    model = load_model_spec(spec)
    search_space = load_space(space)
    try:
        obj = Objective(objective)
    except ValueError:
        raise UserError(
            f"--objective {objective!r}: choose one of {', '.join(o.value for o in Objective)}"
        ) from None
    if sampler not in SAMPLERS:
        raise UserError(f"--sampler {sampler!r}: choose one of {', '.join(SAMPLERS)}")
    if trials is None and minutes is None:
        trials = 20
    database = _open_db(db, migrate=True)

    from autotuner.coordinator import StudyRunner, create_study
    from autotuner.executors.ray_executor import RayExecutor

    study_id = create_study(
        database,
        model=model,
        space=search_space,
        name=name,
        objective=obj,
        max_trials=trials,
        max_minutes=minutes,
        gpus_per_trial=gpus,
        sampler=sampler,
        seed=seed,
    )
    if not as_json:
        err.print(f"study [bold]{study_id}[/]: {model.describe()}; space {search_space.name}")
        err.print("starting Ray...", style="dim")
    executor = RayExecutor(ray_address)
    progress = _TuneProgress(trials, quiet=as_json)
    runner = StudyRunner(database, study_id, executor, on_event=progress.on_event)
    try:
        with progress:
            runner.run()
    except KeyboardInterrupt:
        err.print(f"interrupted; resume or inspect with: autotuner trials {study_id}")
        raise typer.Exit(130) from None
    _print_best(database, study_id, as_json)


class _TuneProgress:
    """A Rich progress bar fed by coordinator events."""

    def __init__(self, total: int | None, *, quiet: bool) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.quiet = quiet
        self.best = 0.0
        self.progress = Progress(
            TextColumn("[bold]trials"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=err,
            disable=quiet,
        )
        self.task = self.progress.add_task("", total=total)

    def __enter__(self) -> _TuneProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def on_event(self, event: Any) -> None:
        if self.quiet:
            return
        params = ", ".join(f"{k}={v}" for k, v in (event.params or {}).items())
        if event.kind == "finished":
            if event.tokens_per_s:
                self.best = max(self.best, event.tokens_per_s)
                line = f"#{event.trial_number} {event.tokens_per_s:,.0f} tok/s  {params}"
            else:
                line = f"#{event.trial_number} {event.state}: {event.message}  {params}"
            if event.state != "failed":  # a failed trial is retried: it does not advance
                self.progress.advance(self.task)
            self.progress.console.print(line, highlight=False, soft_wrap=True)
            self.progress.update(self.task, description=f"best {self.best:,.0f} tok/s")
        elif event.kind == "pruned":
            self.progress.console.print(
                f"[dim]skipped (no GPU time): {params}: {event.message}[/]", highlight=False
            )
        elif event.kind == "lost":
            self.progress.console.print(f"trial #{event.trial_number} was lost; retrying once")


# --------------------------------------------------------------------------- read back


def _load(db: Any, study_ref: str) -> tuple[Any, list[Any]]:
    from autotuner.storage.repository import StudyRepo, TrialRepo

    with db.session() as s:
        study = StudyRepo(s).require(study_ref)
        trials = TrialRepo(s).list(study.id)
        s.expunge_all()
    return study, trials


def _print_best(db: Any, study_ref: str, as_json: bool) -> None:
    from autotuner.views import best_view

    study, trials = _load(db, study_ref)
    view = best_view(study, trials)
    if as_json:
        print(json.dumps(view, indent=2, default=str))
        return
    rec = view["best"]
    if rec is None:
        out.print(f"study {study.id} ({study.status}): no completed trial yet")
        return
    table = Table(title=f"Recommended config: study {study.id} ({study.status})", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for k, v in rec["knobs"].items():
        if k in rec["params"]:
            table.add_row(k, str(v))
    spread = ""
    if rec.get("tokens_per_s_min") is not None:
        spread = f"  (repeats {rec['tokens_per_s_min']:,.0f} .. {rec['tokens_per_s_max']:,.0f})"
    table.add_row("tokens/s", f"{rec['tokens_per_s']:,.0f}{spread}")
    if rec.get("tokens_per_s_per_gpu"):
        table.add_row("tokens/s per GPU", f"{rec['tokens_per_s_per_gpu']:,.0f}")
    table.add_row("MFU", f"{rec['mfu']:.1%}" if rec.get("mfu") is not None else "n/a (no peak)")
    if rec.get("peak_mem_gib") is not None:
        table.add_row("peak memory", f"{rec['peak_mem_gib']:.2f} GiB")
    if rec.get("compile_s"):
        table.add_row("compile time", f"{rec['compile_s']:.1f} s (not in throughput)")
    runner = rec.get("runner_up")
    if runner:
        verdict = "a tie (within noise)" if runner["tie"] else "beyond noise"
        table.add_row(
            "margin",
            f"{runner['margin_rel']:+.1%} over trial #{runner['trial_number']}, "
            f"noise ±{runner['noise_rel']:.1%}: {verdict}",
        )
    table.add_row("trial", f"#{rec['trial_number']} of {view['total_trials']}")
    out.print(table)


@app.command()
@friendly_errors
def best(
    study: Annotated[str, typer.Argument(help="Study id (or a unique prefix, or its name).")],
    db: DbOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Show the best trial so far: config, tokens/s with its spread, MFU, peak memory."""
    _print_best(_open_db(db, migrate=False), study, as_json)


@app.command()
@friendly_errors
def trials(
    study: Annotated[str, typer.Argument(help="Study id (or a unique prefix, or its name).")],
    db: DbOption = None,
    as_json: JsonFlag = False,
) -> None:
    """List every trial of a study with what it measured or why it failed."""
    from autotuner.views import trial_view

    s, rows = _load(_open_db(db, migrate=False), study)
    views = [trial_view(t) for t in rows]
    if as_json:
        print(json.dumps(views, indent=2, default=str))
        return
    table = Table(title=f"Trials of study {s.id} ({s.status})")
    for col in ("#", "state", "params", "tokens/s", "spread", "MFU", "peak GiB", "note"):
        table.add_column(col, justify="right" if col in ("#", "tokens/s", "MFU") else "left")
    for v in views:
        tps = v["tokens_per_s"]
        spread = ""
        if tps and v["tokens_per_s_min"] is not None:
            spread = f"±{(v['tokens_per_s_max'] - v['tokens_per_s_min']) / 2 / tps:.1%}"
        table.add_row(
            str(v["number"]),
            v["state"],
            " ".join(f"{k}={val}" for k, val in v["params"].items()),
            f"{tps:,.0f}" if tps else "",
            spread,
            f"{v['mfu']:.1%}" if v["mfu"] is not None else "",
            f"{v['peak_mem_gib']:.2f}" if v["peak_mem_gib"] is not None else "",
            (f"{v['error_class']}: {v['error_message'] or ''}"[:80] if v["error_class"] else ""),
        )
    out.print(table)


@app.command()
@friendly_errors
def status(
    study: Annotated[
        str | None, typer.Argument(help="A study; omit to list recent studies.")
    ] = None,
    db: DbOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Show one study's progress, or list recent studies."""
    from autotuner.storage.repository import StudyRepo, TrialRepo
    from autotuner.views import study_view

    database = _open_db(db, migrate=False)
    with database.session() as s:
        studies = [StudyRepo(s).require(study)] if study else StudyRepo(s).list(limit=50)
        views = [study_view(st, TrialRepo(s).list(st.id)) for st in studies]
    if as_json:
        print(json.dumps(views[0] if study else views, indent=2, default=str))
        return
    table = Table(title="Studies")
    for col in ("id", "name", "status", "trials", "best #", "created"):
        table.add_column(col)
    for v in views:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(v["trial_counts"].items()))
        table.add_row(
            v["id"],
            v["name"],
            v["status"],
            counts or "-",
            str(v["best_trial_number"] if v["best_trial_number"] is not None else "-"),
            (v["created_at"] or "")[:19],
        )
    out.print(table)


@app.command()
@friendly_errors
def export(
    study: Annotated[str, typer.Argument(help="Study id (or a unique prefix, or its name).")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="json, yaml or env.")] = "json",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")
    ] = None,
    db: DbOption = None,
) -> None:
    """Write the recommended config in a form you can use (JSON, YAML or shell env vars)."""
    from autotuner.export import render
    from autotuner.views import best_view

    s, rows = _load(_open_db(db, migrate=False), study)
    text = render(best_view(s, rows)["best"], fmt, study_id=s.id)
    if output:
        output.write_text(text)
        err.print(f"wrote {output}")
    else:
        sys.stdout.write(text)


@app.command()
def spaces() -> None:
    """List the built-in search spaces."""
    from autotuner.space import builtin_space_names, load_space

    table = Table(title="Built-in search spaces (use with --space NAME)")
    table.add_column("name", style="bold")
    table.add_column("configs", justify="right")
    table.add_column("description")
    for n in builtin_space_names():
        sp = load_space(n)
        size = sp.size()
        table.add_row(n, f"{size:,}" if size else "large", sp.description)
    out.print(table)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
