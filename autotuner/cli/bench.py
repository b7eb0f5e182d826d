"""`autotuner bench ...`: benchmarks of the search, mounted on the main CLI.

    autotuner bench replay --landscape bench/results/landscape_gpt2_124m_h200.json --seeds 20

The benchmark code lives in the repository's bench/ folder (it is not part of the installed
package), so these commands run from a source checkout.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer

from autotuner.cli.help_names import HelpNamedCommand, HelpNamedGroup

app = typer.Typer(
    name="bench",
    cls=HelpNamedGroup,
    help="Benchmarks of the search, replayed through the real coordinator.",
    no_args_is_help=True,
)


def _bench_module(name: str) -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "bench" / f"{name}.py"
    if not path.exists():
        typer.echo(f"error: {path} not found; run from a source checkout of autotuner", err=True)
        raise typer.Exit(2)
    spec = importlib.util.spec_from_file_location(f"autotuner_bench_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@app.command(cls=HelpNamedCommand)
def replay(
    landscape: Annotated[
        Path, typer.Option(help="Recorded landscape (JSON; docs/landscape-format.md).")
    ],
    space: Annotated[
        str, typer.Option(help="Search space file or built-in name; 'auto': the landscape's knobs.")
    ] = "auto",
    seeds: Annotated[int, typer.Option(min=1, help="Runs per strategy (>= 20 for a result).")] = 20,
    strategies: Annotated[
        str, typer.Option(help="Comma-separated: ours,ours-noseed,tpe,random,grid.")
    ] = ("ours,ours-noseed,tpe,random,grid"),
    budget: Annotated[
        int | None, typer.Option(help="Trials per run (default: the recorded configs).")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Model preset (default: the one the landscape names).")
    ] = None,
    drop_best: Annotated[
        int, typer.Option(min=0, help="Stress test: remove the N best recorded configs first.")
    ] = 0,
    global_batch: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Keep only the configs recorded at this global batch (tokens per optimizer "
            "step) and hold it; default: every config, mixed global batches noted.",
        ),
    ] = None,
    minutes: Annotated[
        float | None,
        typer.Option(
            min=0.1,
            help="Run each study on simulated time with this time budget, as `tune --minutes` "
            "on the recorded hardware, and report what it recommended; default: a trial budget.",
        ),
    ] = None,
    note: Annotated[list[str] | None, typer.Option(help="A note for the report.")] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Write replay_NAME.json and replay_NAME.md here (e.g. bench/results)."),
    ] = None,
) -> None:
    """Trials and simulated GPU-seconds until within 2% of the landscape's best, per strategy."""
    if not landscape.exists():
        typer.echo(f"error: no landscape file {landscape}", err=True)
        raise typer.Exit(2)
    bench = _bench_module("replay")
    names = [s.strip() for s in strategies.split(",") if s.strip()]
    unknown = sorted(set(names) - set(bench.STRATEGIES))
    if unknown:
        typer.echo(
            f"error: unknown strategies {unknown}; choose from {', '.join(bench.STRATEGIES)}",
            err=True,
        )
        raise typer.Exit(2)
    command = "autotuner bench replay " + shlex.join(sys.argv[3:]) if len(sys.argv) > 3 else None
    doc = bench.run_benchmark(
        str(landscape),
        space_ref=space,
        seeds=seeds,
        strategies=names,
        budget=budget,
        model=model,
        out_dir=str(out) if out else None,
        command=command,
        drop_best=drop_best,
        extra_notes=note,
        global_batch=global_batch,
        minutes=minutes,
    )
    typer.echo(bench.markdown(doc))
    for path in doc.get("written", []):
        typer.echo(f"wrote {path}")
