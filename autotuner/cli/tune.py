"""`autotuner tune`: a whole study in this process, on a local (or given) Ray cluster."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from autotuner.cli.common import (
    DEFAULT_TRIALS,
    DataOption,
    DbOption,
    GlobalBatchOption,
    GpusOption,
    HeadroomOption,
    JsonFlag,
    MaxMemOption,
    MinutesOption,
    ObjectiveOption,
    OptionPairs,
    PlannedHoursOption,
    PlannedTokensOption,
    ProxyLayersOption,
    RayAddressOption,
    SamplerOption,
    SeedOption,
    SpecArg,
    TokenizerOption,
    TrialsOption,
    UsdOption,
    as_flags,
    data_request,
    err,
    friendly_errors,
    open_db_for_writing,
    option_pairs,
    safe,
    study_request,
)
from autotuner.cli.render import compact_params, show_best
from autotuner.cli.signals import STOP, interruptible
from autotuner.cli.tune_resume import interrupted_to_resume, say_resumed
from autotuner.purpose import Purpose


@friendly_errors
def tune(
    spec: SpecArg,
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
    headroom: HeadroomOption = None,
    proxy_layers: ProxyLayersOption = None,
    global_batch: GlobalBatchOption = None,
    data: DataOption = None,
    tokenizer: TokenizerOption = None,
    sampler: SamplerOption = "tpe",
    seed: SeedOption = 0,
    option: OptionPairs = None,
    name: Annotated[
        str | None,
        typer.Option(
            help="The study's name. Default: its model and space (`tiny / cpu-demo`); an "
            "interrupted study's name resumes it.",
        ),
    ] = None,
    ray_address: RayAddressOption = None,
    db: DbOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Run a study here and print the recommended config.

    Searches the space with real, short trials on a local Ray (started on demand, or
    --ray-address), stores each trial in a SQLite file (or --db), and prints the fastest config
    with its evidence. Without a GPU, trials run a small model on the CPU, same code path.

    Ctrl-C keeps the study `interrupted`; the same command run again goes on where it stopped
    (as `autotuner resume STUDY` does).

    Example: `autotuner tune examples/tiny.yaml --space cpu-demo --trials 8`
    """
    from autotuner.inputs import load_model_spec
    from autotuner.search.space import load_space

    # Read the files here, where their errors can name the file and line; then check the
    # request by the rules the API and `submit` use, before anything is written.
    model = load_model_spec(spec)
    chosen = load_space(space) if space is not None else None
    options = {
        **option_pairs(option),
        "usd_per_gpu_hour": usd_per_gpu_hour,
        "planned_tokens": planned_tokens,
        "planned_hours": planned_hours,
        "max_mem_gib": max_mem_gib,
        "headroom": headroom,
        "proxy_layers": proxy_layers,
    }
    request = study_request(
        model=model.model_dump(mode="json"),
        # Without --space the default depends on the cluster: it is set once Ray is up.
        **({"space": chosen.model_dump(mode="json", by_alias=True)} if chosen else {}),
        name=name or None,
        objective=objective,
        max_trials=trials if trials is not None or minutes is not None else DEFAULT_TRIALS,
        max_minutes=minutes,
        gpus_per_trial=gpus,
        sampler=sampler,
        seed=seed,
        options={k: v for k, v in options.items() if v is not None},
        global_batch_tokens=global_batch,
        data=data_request(data, tokenizer),
    )
    # Checked before the database is opened (a refused request writes nothing, not even it).
    validated = _validated(request) if chosen is not None else None
    database = open_db_for_writing(db)
    # Before Ray starts: a `tune` that cannot go on with its interrupted study says so now.
    again = interrupted_to_resume(database, request, *validated) if validated else None

    import os

    from autotuner.storage.study_repo import StudyRepo
    from autotuner.study.coordinator import default_owner
    from autotuner.study.factory_access import ENV_VAR as FACTORY_DIRS_ENV
    from autotuner.study.operations import create_requested
    from autotuner.study.resume import resume_study

    # A service's setting (its workers run only its checked factories): a Ray started here runs
    # the user's own model code, as `tune` validates it.
    os.environ.pop(FACTORY_DIRS_ENV, None)
    executor = start_ray(ray_address, as_json)
    target = executor.target()
    if chosen is None:  # the default suits the hardware the trials will run on
        default = "single-gpu-quick" if target.device_type == "cuda" else "cpu-demo"
        request = request.model_copy(update={"space": default})
    # Again with the cluster known: as the service does, refuse more GPUs per trial than it has.
    model, search_space = _validated(request, target)
    if chosen is None:  # its name is known now, with the space
        again = interrupted_to_resume(database, request, model, search_space)
    owner = default_owner()
    if again is not None:
        # The same command after a Ctrl-C: the study goes on where it stopped, as `resume`.
        view = resume_study(database, again, owner=owner)
        resumed = say_resumed(database, view, as_json)
        run_here(database, again, executor, owner, view.get("max_trials"), as_json, resumed)
        return
    study_id = create_requested(
        database, request, model, search_space, device_type=target.device_type
    )
    # Take the study's lease at once: a service sharing this database must not adopt the
    # queued study before this process starts running it.
    with database.session() as s:
        StudyRepo(s).try_acquire(study_id, owner, 300.0)
    if not as_json:
        # Two lines: as one, the model's sizes wrapped mid-phrase at 80 columns.
        err.print(
            f"study [bold]{study_id}[/]: space {safe(search_space.name)}\n"
            f"  model {safe(model.describe())}",
            highlight=False,
        )
    run_here(database, study_id, executor, owner, request.max_trials, as_json)


def start_ray(ray_address: str | None, as_json: bool) -> Any:
    """The Ray executor `tune` and `resume` run their trials on (a local Ray started here unless
    --ray-address). Ray takes seconds to start; a Ctrl-C meanwhile comes before any study is
    created or changed, and is said so (exit 130) rather than left to end the process silently."""
    executor = None
    try:  # the line said, the import and the start: a Ctrl-C anywhere in them is answered
        if not as_json:
            err.print("starting Ray...", style="dim")
        from autotuner.executors.ray_executor import RayExecutor

        executor = RayExecutor(ray_address)
        STOP.check()  # one dropped where Python drops exceptions (signals.py)
    except KeyboardInterrupt:
        STOP.pending = False
        if executor is not None:
            executor.close()
        err.print("interrupted while Ray was starting: no study was created or changed")
        raise typer.Exit(130) from None
    return executor


def run_here(
    database: Any,
    study_id: str,
    executor: Any,
    owner: str,
    total: int | None,
    as_json: bool,
    resumed: Any = None,
) -> None:
    """Run the study whose lease `owner` holds to its end in this process, and print its
    recommendation (exit 1 for a failed study); a `resumed` study's progress bar starts where
    it stands (study/restore_standing.py). Ctrl-C or SIGTERM interrupts it: the trials in flight
    are cancelled, the study is stored `interrupted` (nothing left running), and the exit
    status is 128 + the signal's number (130, 143) with the command that continues it."""
    from autotuner.inputs import UserError
    from autotuner.study.coordinator import StudyRunner
    from autotuner.study.pause import WaitingForGpus

    progress = _TuneProgress(total, quiet=as_json)
    if resumed is not None:
        progress.start_at(resumed.done, resumed.best_tokens_per_s)
    runner = StudyRunner(database, study_id, executor, owner=owner, on_event=progress.on_event)
    interrupted = False
    try:
        with interruptible() as stopped, progress:
            try:
                runner.run(between_rounds=stopped.check)
            except WaitingForGpus as exc:
                # A GPU study resumed where its GPUs are not: it stays interrupted, not
                # waiting here for GPUs that this machine will never have.
                runner.interrupt(f"interrupted: resumed where its GPUs are not ({exc})")
                raise UserError(
                    f"study {study_id} runs on GPUs and this cluster has none: {exc}; resume "
                    "it where they are (--ray-address, or --server URL)"
                ) from None
            except KeyboardInterrupt:
                # Ignored from here on: a second Ctrl-C must not cut the write short.
                runner.interrupt(f"interrupted by {stopped.name}")
                interrupted = True
        if interrupted:  # said below the progress bar's last drawing, as the last line
            err.print(
                f"study {study_id} interrupted by {stopped.name}: its running trials were "
                f"cancelled; continue it with: autotuner resume {study_id} (or the same "
                "tune command again)",
                highlight=False,
            )
            raise typer.Exit(128 + stopped.number)
    finally:
        executor.close()
    from autotuner.study.operations import get_best

    progress.print_repeats()
    best = get_best(database, study_id)
    if best["status"] == "failed":
        # The study's one reason (study/ending.py), then what it got to, if anything: a
        # failed study has no recommendation to act on, so the exit status says so (1).
        if not as_json:
            err.print(
                f"[bold red]study {study_id} failed:[/] {safe(best['error_message'] or '')}",
                highlight=False,
                soft_wrap=True,
            )
        if as_json or best["best"] is not None:
            show_best(best, as_json)
        raise typer.Exit(1)
    show_best(best, as_json)


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
        # A reason said once: the trials and proposals that repeat it are counted, not printed
        # again (a factory every config failed on printed its reason 237 times).
        self.reasons = ReasonCounter()

    def start_at(self, done: int, best: float) -> None:
        """A resumed study's bar: its settled trials, and its best so far."""
        self.best = best
        described = f"best {best:,.0f} tok/s" if best else ""
        self.progress.update(self.task, completed=done, description=described)

    def __enter__(self) -> _TuneProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def on_event(self, event: Any) -> None:
        if self.quiet:
            return
        # `mb=32 bf16 flash compile`: what ran (a numerics reference runs the candidate's
        # knobs at the reference precision; its row names the candidate's).
        params = safe(compact_params({**(event.params or {}), **event.ran}))
        if event.kind == "finished":
            # Proxies (a shallower model) and end checks are not measurements of a candidate:
            # labelled, and never the progress bar's best.
            label = _PURPOSE_LABELS.get(event.purpose or "", "")
            if event.loss_curve and event.tokens_per_s and event.purpose == Purpose.HEADROOM:
                # A headroom check that ran the numerics check's candidate steps first.
                curve = event.loss_curve
                line = (
                    f"#{event.trial_number} headroom and numerics check: "
                    f"{event.tokens_per_s:,.0f} tok/s, {len(curve)} parity steps, loss "
                    f"{curve[0]:.3g} -> {curve[-1]:.3g}  {params}"
                )
            elif event.loss_curve:
                # A parity trial: its loss is what it measured; its tokens/s counts its compile.
                curve = event.loss_curve
                line = (
                    f"#{event.trial_number} {label}{len(curve)} steps, loss "
                    f"{curve[0]:.3g} -> {curve[-1]:.3g}  {params}"
                )
                if event.message:
                    line += f"\n  {safe(event.message)}"
            elif event.tokens_per_s:
                if not label:
                    self.best = max(self.best, event.tokens_per_s)
                shown = label or _SEED_LABELS.get(event.purpose or "", "")
                line = f"#{event.trial_number} {shown}{event.tokens_per_s:,.0f} tok/s  {params}"
            else:
                shown = label or _SEED_LABELS.get(event.purpose or "", "")
                said = self.reasons.first(event.message, event.trial_number)
                why = safe(event.message) if said is None else f"as #{said} (above)"
                line = f"#{event.trial_number} {shown}{event.state}: {why}  {params}"
            # One step per trial of the budget (`max_trials`), as the result counts them: a
            # failed trial that is retried advances when its retry ends; one that is not (an end
            # check, a re-measurement, a second attempt) advances now, or the bar stops short.
            if not event.retried:
                self.progress.advance(self.task)
            self.progress.console.print(line, highlight=False, soft_wrap=True)
            self.progress.update(self.task, description=f"best {self.best:,.0f} tok/s")
        elif event.kind == "pruned":
            said = self.reasons.first(event.message, event.trial_number)
            why = safe(event.message) if said is None else f"as #{said} (above)"
            self.progress.console.print(
                f"[dim]#{event.trial_number} not run: {params}: {why}[/]",
                highlight=False,
            )
        elif event.kind == "lost":
            self.progress.console.print(
                f"trial #{event.trial_number} was lost (not its config's failure); it runs again"
            )
        elif event.kind == "carried":
            self.progress.console.print(f"[dim]{safe(event.message)}[/]", highlight=False)
        elif event.kind in ("search_over", "remeasure_cut", "checks_cut", "waiting"):
            # The time budget's end is kept for the end checks, or they did not fit in it
            # (search/end_time.py); or the study waits for its cluster (study/pause.py).
            self.progress.console.print(f"[yellow]{safe(event.message)}[/]", highlight=False)

    def print_repeats(self) -> None:
        """Once the study is over: each reason that repeated, with how many trials it ended."""
        if self.quiet:
            return
        for number, count in self.reasons.repeated():
            err.print(
                f"[dim]the reason of #{number} ended {count} trials or proposals in all[/]",
                highlight=False,
            )


class ReasonCounter:
    """Failure and prune reasons by their text: the trial that said each first, and how often."""

    def __init__(self) -> None:
        self._first: dict[str, int] = {}
        self._count: dict[str, int] = {}

    def first(self, message: str | None, number: int | None) -> int | None:
        """Count `message`; None the first time (print it), else the trial that said it."""
        if not message or number is None:
            return None
        self._count[message] = self._count.get(message, 0) + 1
        if message in self._first:
            return self._first[message]
        self._first[message] = number
        return None

    def repeated(self) -> list[tuple[int, int]]:
        """(first trial, count) of each reason said more than once, most frequent first."""
        out = [(self._first[m], n) for m, n in self._count.items() if n > 1]
        return sorted(out, key=lambda pair: (-pair[1], pair[0]))


# A candidate labelled for what it is compared with (it counts for the best, unlike the above).
_SEED_LABELS: dict[str, str] = {Purpose.EXPERT_DEFAULT: "expert default: "}
_PURPOSE_LABELS: dict[str, str] = {
    Purpose.PROXY: "proxy (shallow model): ",
    Purpose.HEADROOM: "headroom check: ",
    Purpose.PARITY: "numerics check: ",
    Purpose.PARITY_REFERENCE: "numerics reference: ",
    Purpose.REFERENCE: "1-GPU reference: ",
}


def _validated(request: Any, target: Any = None) -> Any:
    """`validate_request`, its errors in the words of this command's flags."""
    from autotuner.inputs import UserError
    from autotuner.study.data_access import DataAccess
    from autotuner.study.factory_access import FactoryAccess
    from autotuner.study.operations import validate_request

    try:
        # `tune` runs as the user on their own machine: any path they can read is theirs, and
        # any model code they can import.
        return validate_request(
            request,
            target,
            data_access=DataAccess.anywhere(),
            factory_access=FactoryAccess.anywhere(),
        )
    except UserError as exc:
        raise UserError(as_flags(str(exc))) from None
