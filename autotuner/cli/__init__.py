"""The `autotuner` command line.

Heavy imports (Ray, Optuna, SQLAlchemy) happen inside the commands that need them, and torch is
never imported here at all, so `autotuner --help` and `autotuner best` answer quickly.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console

if TYPE_CHECKING:
    from autotuner.options import StudyOptions
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
ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        envvar="AUTOTUNER_SERVER",
        help="The autotuner service's URL (e.g. http://tuner:8000); sends $AUTOTUNER_TOKEN. "
        "Without it, commands work on the local database (--db).",
        show_default=False,
    ),
]
StudyArg = Annotated[str, typer.Argument(help="Study id (or a unique prefix, or its name).")]

GpusOption = Annotated[int, typer.Option("--gpus", min=1, help="GPUs per trial.")]
TrialsOption = Annotated[
    int | None, typer.Option("--trials", "-n", min=1, help="Stop after this many trials.")
]
MinutesOption = Annotated[
    float | None, typer.Option("--minutes", "-m", min=0.1, help="Stop launching after this.")
]
SamplerOption = Annotated[str, typer.Option(help="tpe (default), random, grid or gp.")]
SeedOption = Annotated[int, typer.Option(help="Sampler seed (same seed, same proposals).")]
NameOption = Annotated[str | None, typer.Option(help="A name for the study.")]
ObjectiveOption = Annotated[
    str,
    typer.Option(
        help="What to maximise: tokens_per_s, tokens_per_s_per_gpu, mtokens_per_usd (needs "
        "--usd-per-gpu-hour) or time_to_train (charges compile time; needs --planned-tokens "
        "or --planned-hours)."
    ),
]
UsdOption = Annotated[
    float | None, typer.Option(min=0.0, help="Price of one GPU hour, for mtokens_per_usd.")
]
PlannedTokensOption = Annotated[
    float | None, typer.Option(min=0.0, help="Tokens the real run will train on (time_to_train).")
]
PlannedHoursOption = Annotated[
    float | None, typer.Option(min=0.0, help="Or the real run's length in hours (time_to_train).")
]
MaxMemOption = Annotated[
    float | None,
    typer.Option(min=0.0, help="Memory ceiling in GiB: configs that need more are infeasible."),
]


def _study_options(**values: float | None) -> StudyOptions:
    """The options a command's flags set, validated; errors name the flag (`--max-mem-gib`)."""
    from pydantic import ValidationError

    from autotuner.inputs import UserError, describe_validation_error
    from autotuner.options import StudyOptions

    try:
        return StudyOptions.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        raise UserError(_as_flags(describe_validation_error(exc))) from None


def _as_flags(message: str) -> str:
    # The same checks serve the API (options.x) and these commands (--x): speak in flags.
    return re.sub(
        r"(?:options\.)?\b(usd_per_gpu_hour|planned_tokens|planned_hours|max_mem_gib)\b",
        lambda m: "--" + m.group(1).replace("_", "-"),
        message,
    )


def friendly_errors(fn: F) -> F:
    """Turn the errors a user can fix into one clear line and exit code 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if not _user_facing(exc):
                raise
            from rich.markup import escape

            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def _user_facing(exc: Exception) -> bool:
    from autotuner.inputs import UserError

    if isinstance(exc, UserError):
        return True
    # Checked only if already imported: a command talking to the service never loads SQLAlchemy.
    for module, name in (
        ("autotuner.storage.repository", "StudyNotFound"),
        ("autotuner.storage.session", "DatabaseUnavailable"),
        ("autotuner.study.operations", "NotFound"),
    ):
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(exc, getattr(loaded, name)):
            return True
    return False


def _open_db_for_writing(db_url: str | None) -> Any:
    """The results database, reachable and migrated to this version's schema."""
    from autotuner.storage.session import Database, resolve_database_url, upgrade_database

    url = resolve_database_url(db_url)
    db = Database(url)
    db.check()
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
        str | None,
        typer.Option(
            "--space",
            "-s",
            help="Search space: a built-in name or a YAML file. Default: single-gpu-quick when "
            "the cluster has GPUs, cpu-demo when it has none.",
            show_default=False,
        ),
    ] = None,
    trials: TrialsOption = None,
    minutes: MinutesOption = None,
    gpus: GpusOption = 1,
    objective: ObjectiveOption = "tokens_per_s",
    usd_per_gpu_hour: UsdOption = None,
    planned_tokens: PlannedTokensOption = None,
    planned_hours: PlannedHoursOption = None,
    max_mem_gib: MaxMemOption = None,
    sampler: SamplerOption = "tpe",
    seed: SeedOption = 0,
    name: NameOption = None,
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
    from autotuner.search.objective import Objective, check_options
    from autotuner.search.sampler import SAMPLERS
    from autotuner.search.space import load_space

    # Validate everything before anything is written.
    model = load_model_spec(spec)
    search_space = load_space(space) if space is not None else None
    try:
        obj = Objective(objective)
    except ValueError:
        raise UserError(
            f"--objective {objective!r}: choose one of {', '.join(o.value for o in Objective)}"
        ) from None
    if sampler not in SAMPLERS:
        raise UserError(f"--sampler {sampler!r}: choose one of {', '.join(SAMPLERS)}")
    options = _study_options(
        usd_per_gpu_hour=usd_per_gpu_hour,
        planned_tokens=planned_tokens,
        planned_hours=planned_hours,
        max_mem_gib=max_mem_gib,
    )
    try:
        check_options(obj, options)
    except ValueError as exc:
        raise UserError(_as_flags(str(exc))) from None
    if trials is None and minutes is None:
        trials = 20
    database = _open_db_for_writing(db)

    from autotuner.executors.ray_executor import RayExecutor
    from autotuner.storage.repository import StudyRepo
    from autotuner.study.coordinator import StudyRunner, create_study, default_owner

    if not as_json:
        err.print("starting Ray...", style="dim")
    executor = RayExecutor(ray_address)
    if search_space is None:  # the default suits the hardware the trials will run on
        on_gpu = executor.target().device_type == "cuda"
        search_space = load_space("single-gpu-quick" if on_gpu else "cpu-demo")
    owner = default_owner()
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
        options=options,
    )
    # Take the study's lease at once: a service sharing this database must not adopt the
    # queued study before this process starts running it.
    with database.session() as s:
        StudyRepo(s).try_acquire(study_id, owner, 300.0)
    if not as_json:
        err.print(f"study [bold]{study_id}[/]: {model.describe()}; space {search_space.name}")
    progress = _TuneProgress(trials, quiet=as_json)
    runner = StudyRunner(database, study_id, executor, owner=owner, on_event=progress.on_event)
    try:
        with progress:
            runner.run()
    except KeyboardInterrupt:
        err.print(f"interrupted; resume or inspect with: autotuner trials {study_id}")
        raise typer.Exit(130) from None
    from autotuner.study.operations import get_best, get_study

    failed = get_study(database, study_id)
    if failed["status"] == "failed":
        raise UserError(f"study {study_id} failed: {failed['error_message']}")
    _show_best(get_best(database, study_id), as_json)


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


# --------------------------------------------------------------------------- submit, read back


def _backend(server: str | None, db: str | None) -> Any:
    from autotuner.cli.client import connect

    return connect(server, db)


@app.command()
@friendly_errors
def submit(
    spec: Annotated[
        str, typer.Argument(help="Model spec: a YAML/JSON file, or a preset name like gpt2-124m.")
    ],
    space: Annotated[
        str,
        typer.Option("--space", "-s", help="Search space: a built-in name or a YAML/JSON file."),
    ] = "single-gpu-quick",
    gpus: GpusOption = 1,
    trials: TrialsOption = None,
    minutes: MinutesOption = None,
    objective: ObjectiveOption = "tokens_per_s",
    usd_per_gpu_hour: UsdOption = None,
    planned_tokens: PlannedTokensOption = None,
    planned_hours: PlannedHoursOption = None,
    max_mem_gib: MaxMemOption = None,
    sampler: SamplerOption = "tpe",
    seed: SeedOption = 0,
    name: NameOption = None,
    server: ServerOption = None,
    db: DbOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Queue a study on the service (or the local database) and print its id.

    The model spec and a space file are read here and sent as data; the service validates
    them and answers with what to fix if anything is wrong.
    """
    body: dict[str, Any] = {
        "model": _read_model_arg(spec),
        "space": _read_space_arg(space),
        "gpus_per_trial": gpus,
        "max_trials": trials if trials is not None or minutes is not None else 20,
        "max_minutes": minutes,
        "objective": objective,
        "sampler": sampler,
        "seed": seed,
    }
    if name:
        body["name"] = name
    options = _study_options(
        usd_per_gpu_hour=usd_per_gpu_hour,
        planned_tokens=planned_tokens,
        planned_hours=planned_hours,
        max_mem_gib=max_mem_gib,
    )
    if options.stored():
        body["options"] = options.stored()
    view = _backend(server, db).submit(body)
    if as_json:
        print(json.dumps(view, indent=2, default=str))
        return
    print(view["id"])
    where = "the service" if server else "the local database (run it with `autotuner serve`)"
    err.print(
        f"queued study [bold]{view['id']}[/] ({view['name']}) on {where}; "
        f"follow it with: autotuner best {view['id']} --watch",
        highlight=False,
    )


def _read_model_arg(spec: str) -> Any:
    from autotuner.inputs import read_structured_file
    from autotuner.presets import MODEL_PRESETS

    path = Path(spec)
    if path.exists():
        return read_structured_file(path)
    if spec in MODEL_PRESETS:
        return spec
    from autotuner.inputs import UserError

    raise UserError(
        f"{spec}: no such file (or preset); give a YAML/JSON model spec or one of the "
        f"presets: {', '.join(MODEL_PRESETS)}"
    )


def _read_space_arg(space: str) -> Any:
    from autotuner.inputs import read_structured_file

    path = Path(space)
    return read_structured_file(path) if path.exists() else space


def _best_renderable(view: dict[str, Any]) -> Any:
    from rich.text import Text

    rec = view["best"]
    if rec is None:
        return Text(
            f"study {view['study']} ({view['status']}): no completed trial yet "
            f"({view['total_trials']} trial(s) so far)"
        )
    table = Table(
        title=f"Recommended config: study {view['study']} ({view['status']})", show_header=False
    )
    table.add_column(style="bold")
    table.add_column()
    for k, v in rec["knobs"].items():
        if k in rec["params"]:
            table.add_row(k, str(v))
    spread = ""
    if rec.get("tokens_per_s_min") is not None:
        spread = f"  (repeats {rec['tokens_per_s_min']:,.0f} .. {rec['tokens_per_s_max']:,.0f})"
    table.add_row("tokens/s", f"{rec['tokens_per_s']:,.0f}{spread}")
    on_gpu = (rec.get("fingerprint") or {}).get("device_type") == "cuda"
    if rec.get("tokens_per_s_per_gpu") and on_gpu:  # a CPU trial has no GPU to divide by
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
    return table


def _show_best(view: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(view, indent=2, default=str))
    else:
        out.print(_best_renderable(view))


FINISHED = ("completed", "cancelled", "failed")


@app.command()
@friendly_errors
def best(
    study: StudyArg,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Keep redrawing as trials land, until it ends.")
    ] = False,
    interval: Annotated[
        float, typer.Option(min=0.2, help="Seconds between redraws with --watch.")
    ] = 2.0,
    server: ServerOption = None,
    db: DbOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Show the best trial so far: config, tokens/s with its spread, MFU, peak memory."""
    backend = _backend(server, db)
    if not watch:
        _show_best(backend.best(study), as_json)
        return
    try:
        if as_json:
            _watch_json(backend, study, interval)
        else:
            _watch_table(backend, study, interval)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def _watch_json(backend: Any, study: str, interval: float) -> None:
    """One JSON line per change (for scripts), until the study ends."""
    import time

    last = None
    while True:
        view = backend.best(study)
        line = json.dumps(view, default=str, sort_keys=True)
        if line != last:
            print(line, flush=True)
            last = line
        if view["status"] in FINISHED:
            return
        time.sleep(interval)


def _watch_table(backend: Any, study: str, interval: float) -> None:
    import time

    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    def frame(view: dict[str, Any]) -> Any:
        stamp = time.strftime("%H:%M:%S")
        line = (
            f"{view['status']}: {view['completed_trials']} measured of {view['total_trials']} "
            f"trial(s); updated {stamp}"
            + ("" if view["status"] in FINISHED else f", every {interval:g} s (Ctrl-C to stop)")
        )
        return Group(_best_renderable(view), Text(line, style="dim"))

    view = backend.best(study)
    with Live(frame(view), console=out, auto_refresh=False) as live:
        while view["status"] not in FINISHED:
            time.sleep(interval)
            view = backend.best(study)
            live.update(frame(view), refresh=True)


@app.command()
@friendly_errors
def trials(
    study: StudyArg,
    server: ServerOption = None,
    db: DbOption = None,
    as_json: JsonFlag = False,
) -> None:
    """List every trial of a study with what it measured or why it failed."""
    backend = _backend(server, db)
    views = backend.trials(study)
    if as_json:
        print(json.dumps(views, indent=2, default=str))
        return
    s = backend.study(study)
    table = Table(title=f"Trials of study {s['id']} ({s['status']})")
    for col in ("#", "state", "params", "tokens/s", "spread", "MFU", "peak GiB", "note"):
        table.add_column(col, justify="right" if col in ("#", "tokens/s", "MFU") else "left")
    for v in views:
        tps = v["tokens_per_s"]
        spread = ""
        if tps and v["tokens_per_s_min"] is not None:
            spread = f"±{(v['tokens_per_s_max'] - v['tokens_per_s_min']) / 2 / tps:.1%}"
        note = f"{v['error_class']}: {v['error_message'] or ''}"[:80] if v["error_class"] else ""
        if v.get("retry_of") is not None:
            note = f"retry of #{v['retry_of']}" + (f"; {note}" if note else "")
        table.add_row(
            str(v["number"]),
            v["state"],
            " ".join(f"{k}={val}" for k, val in v["params"].items()),
            f"{tps:,.0f}" if tps else "",
            spread,
            f"{v['mfu']:.1%}" if v["mfu"] is not None else "",
            f"{v['peak_mem_gib']:.2f}" if v["peak_mem_gib"] is not None else "",
            note,
        )
    out.print(table)


@app.command()
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
    backend = _backend(server, db)
    views = [backend.study(study)] if study else backend.studies(limit=50)
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
    if study and views[0].get("error_message"):
        err.print(f"error: {views[0]['error_message']}", highlight=False, soft_wrap=True)


@app.command()
@friendly_errors
def cancel(
    study: StudyArg,
    server: ServerOption = None,
    db: DbOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Cancel a queued or running study; its running trials are stopped."""
    view = _backend(server, db).cancel(study)
    if as_json:
        print(json.dumps(view, indent=2, default=str))
    else:
        out.print(f"study {view['id']} cancelled", highlight=False)


@app.command()
@friendly_errors
def export(
    study: StudyArg,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="json, yaml, env (shell exports) or torchrun (a script that re-runs the "
            "winning trial with this repo's trial runner).",
        ),
    ] = "json",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")
    ] = None,
    server: ServerOption = None,
    db: DbOption = None,
) -> None:
    """Write the recommended config in a form you can use."""
    from autotuner.study.request import EXPORT_FORMATS

    if fmt not in EXPORT_FORMATS:
        from autotuner.inputs import UserError

        raise UserError(f"--format {fmt!r}: choose one of {', '.join(EXPORT_FORMATS)}")
    text = _backend(server, db).export(study, fmt)
    if output:
        output.write_text(text)
        if fmt == "torchrun":
            output.chmod(0o755)
        err.print(f"wrote {output}")
    else:
        sys.stdout.write(text)


# --------------------------------------------------------------------------- serve


@app.command()
@friendly_errors
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    db: DbOption = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address", envvar="RAY_ADDRESS", help="Existing Ray cluster; default: local."
        ),
    ] = None,
    migrate: Annotated[
        bool,
        typer.Option(
            help="Bring the schema to the latest revision on start (--no-migrate when a "
            "separate step runs `alembic upgrade head`)."
        ),
    ] = True,
    coordinator: Annotated[
        bool, typer.Option(help="Run studies in this process (--no-coordinator: API only).")
    ] = True,
    coordinator_id: Annotated[
        str | None,
        typer.Option(
            envvar="AUTOTUNER_COORDINATOR_ID",
            help="Lease owner id of this coordinator; default serve@HOST:PORT. A restarted "
            "service with the same id takes its studies back at once.",
        ),
    ] = None,
    executor: Annotated[
        str, typer.Option(hidden=True, envvar="AUTOTUNER_EXECUTOR", help="ray | replay:FILE")
    ] = "ray",
    lease_ttl: Annotated[float, typer.Option(hidden=True, min=2.0)] = 60.0,
    heartbeat_interval: Annotated[float, typer.Option(hidden=True, min=0.1)] = 5.0,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the service: the JSON API (/api, OpenAPI at /docs) and the coordinator.

    Mutating calls need $AUTOTUNER_TOKEN as a bearer token when it is set (always set it when
    the service listens beyond localhost). Studies left unfinished by a previous run are picked
    up again on start.
    """
    import logging
    import os

    import uvicorn

    from autotuner.api.app import ServiceSettings, create_app
    from autotuner.storage.session import resolve_database_url

    token = os.environ.get("AUTOTUNER_TOKEN") or None
    if not token and host not in ("127.0.0.1", "localhost", "::1"):
        err.print(
            f"[bold yellow]warning:[/] listening on {host} without AUTOTUNER_TOKEN: anyone "
            "who reaches this port can submit and cancel studies"
        )
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    db_url = resolve_database_url(db)
    from autotuner.storage.session import Database

    Database(db_url).check()  # an unreachable database is one clear line, not a traceback
    settings = ServiceSettings(
        db_url=db_url,
        token=token,
        executor=executor,
        ray_address=ray_address,
        owner=coordinator_id,
        port=port,
        coordinator=coordinator,
        migrate=migrate,
        lease_ttl_s=lease_ttl,
        heartbeat_interval_s=heartbeat_interval,
    )
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        log_level=log_level.lower(),
        timeout_graceful_shutdown=10,
    )


@app.command()
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


app.add_typer(__import__("autotuner.cli.bench", fromlist=["app"]).app, name="bench")


def main() -> None:
    app()
