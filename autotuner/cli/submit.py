"""`autotuner submit`: a study queued on the service (or a local database) for its coordinator.

The model spec and a space file are read here (an `hf_config` file inlined, a relative factory
file made absolute from the spec file's folder, as `tune` reads them) and sent as data; the
service validates the request by the rules `tune` applies.
"""

from __future__ import annotations

from pathlib import Path
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
    NameOption,
    ObjectiveOption,
    OptionPairs,
    PlannedHoursOption,
    PlannedTokensOption,
    ProxyLayersOption,
    SamplerOption,
    SeedOption,
    ServerOption,
    SpecArg,
    TokenizerOption,
    TrialsOption,
    UsdOption,
    as_flags,
    backend,
    data_request,
    err,
    friendly_errors,
    option_pairs,
    safe,
    study_options,
    study_request,
)
from autotuner.cli.render import print_json


@friendly_errors
def submit(
    spec: SpecArg,
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
    headroom: HeadroomOption = None,
    proxy_layers: ProxyLayersOption = None,
    global_batch: GlobalBatchOption = None,
    data: DataOption = None,
    tokenizer: TokenizerOption = None,
    sampler: SamplerOption = "tpe",
    seed: SeedOption = 0,
    option: OptionPairs = None,
    name: NameOption = None,
    server: ServerOption = None,
    db: DbOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Queue a study on the service (or local database); print its id.

    The model spec and a space file are read here (a relative factory or hf_config file from
    the spec's folder) and sent as data; the service validates them and answers with what to
    fix if anything is wrong. Follow it with `autotuner best ID --watch`.
    """
    body: dict[str, Any] = {
        "model": _read_model_arg(spec),
        "space": _read_space_arg(space),
        "gpus_per_trial": gpus,
        "max_trials": trials if trials is not None or minutes is not None else DEFAULT_TRIALS,
        "max_minutes": minutes,
        "objective": objective,
        "sampler": sampler,
        "seed": seed,
    }
    if name:
        body["name"] = name
    if global_batch is not None:
        body["global_batch_tokens"] = global_batch
    if data is not None or tokenizer is not None:
        body["data"] = data_request(data, tokenizer)
    options = study_options(
        **option_pairs(option),
        usd_per_gpu_hour=usd_per_gpu_hour,
        planned_tokens=planned_tokens,
        planned_hours=planned_hours,
        max_mem_gib=max_mem_gib,
        headroom=headroom,
        proxy_layers=proxy_layers,
    )
    if options.stored():
        body["options"] = options.stored()
    # Checked here too, by the service's rules, so an error names the flag (`--gpus`).
    study_request(**body)
    from autotuner.inputs import UserError

    try:
        view = backend(server, db).submit(body)
    except UserError as exc:  # the service's (or the database's) check, said in flags
        raise type(exc)(as_flags(str(exc))) from None
    if as_json:
        print_json(view)
        return
    print(safe(view["id"]))
    where = "the service" if server else "the local database (run it with `autotuner serve`)"
    err.print(
        f"queued study [bold]{safe(view['id'])}[/] ({safe(view['name'])}) on {where}; "
        f"follow it with: autotuner best {safe(view['id'])} --watch",
        highlight=False,
    )


def _read_model_arg(spec: str) -> Any:
    from autotuner.inputs import read_model_spec_file
    from autotuner.presets import MODEL_PRESETS

    path = Path(spec)
    if path.exists():
        return read_model_spec_file(path)  # an hf_config file name becomes its contents
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
