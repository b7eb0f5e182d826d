"""What the verbs share: option types, the consoles, error handling and opening the database.

Commands declare their flags with these `Annotated` types, so a flag that several verbs take
(`--db`, `--json`, the study's budget and objective) reads and helps the same everywhere.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console

if TYPE_CHECKING:
    from autotuner.cli.client import Backend
    from autotuner.options import StudyOptions
    from autotuner.storage.session import Database
    from autotuner.study.request import StudyRequest

out = Console()
err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

# --------------------------------------------------------------------------- option types

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="AUTOTUNER_DATABASE_URL",
        help="Database URL: postgresql://user@host/db, sqlite:///path or a file path. "
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
RayAddressOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address", envvar="RAY_ADDRESS", help="Existing Ray cluster; default: local."
    ),
]
StudyArg = Annotated[str, typer.Argument(help="Study id (or a unique prefix, or its name).")]

# A study's request, as `tune` and `submit` take it.
SpecArg = Annotated[
    str, typer.Argument(help="Model spec: a YAML/JSON file, or a preset name like gpt2-124m.")
]
GpusOption = Annotated[int, typer.Option("--gpus", min=1, help="GPUs per trial.")]
DEFAULT_TRIALS = 20  # the budget when neither --trials nor --minutes is given
TrialsOption = Annotated[
    int | None,
    typer.Option(
        "--trials",
        "-n",
        min=1,
        help=f"Stop after this many trials. Default: {DEFAULT_TRIALS}, or no limit with --minutes.",
        show_default=False,
    ),
]
MinutesOption = Annotated[
    float | None,
    typer.Option(
        "--minutes",
        "-m",
        min=0.1,
        help="Time budget in minutes: no trial starts that would end past it (one running "
        "finishes). The search stops early enough for the winner's end checks to fit; where "
        "they could not, the recommendation says so.",
    ),
]
SamplerOption = Annotated[str, typer.Option(help="Optuna's tpe, random, grid or gp.")]
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
HeadroomOption = Annotated[
    float | None,
    typer.Option(
        "--headroom",
        min=0.0,
        help="Share of GPU memory the recommendation keeps free (0 to 0.9; default 0.1) for "
        "evaluation, checkpoints, fragmentation: the winner is re-run once with both to "
        "check. 0: none, no check.",
        show_default=False,
    ),
]
ProxyLayersOption = Annotated[
    int | None,
    typer.Option(
        "--proxy-layers",
        min=1,
        help="Cheaper trials for big models: each new kind of config runs first on a model "
        "this many layers deep (same width), so the throughput model learns it before a "
        "full-depth trial is spent. Proxies are never recommended. Default: none.",
        show_default=False,
    ),
]
# The study options with a flag of their own (`--headroom`...): `--option` refuses them, so
# each option has one spelling.
FLAGGED_OPTIONS = (
    "usd_per_gpu_hour",
    "planned_tokens",
    "planned_hours",
    "max_mem_gib",
    "headroom",
    "proxy_layers",
)
OptionPairs = Annotated[
    list[str] | None,
    typer.Option(
        "--option",
        help="Any other study option, repeatable: e.g. remeasure_top=0 (no re-measurement), "
        "early_stop_patience=20, history_seeds=0, numerics_check=false. An unknown KEY lists "
        "them all.",
        show_default=False,
    ),
]
GlobalBatchOption = Annotated[
    int | None,
    typer.Option(
        "--global-batch",
        min=1,
        help="Tokens per optimizer step, held exactly (micro-batch x seq_len x GPUs x "
        "accumulation): accumulation is derived, and micro-batches that do not divide it are "
        "never run. Default: the space's, or none (each trial's own).",
        show_default=False,
    ),
]
DataOption = Annotated[
    str | None,
    typer.Option(
        "--data",
        help="Measure on your own tokens, through the real DataLoader: a nanoGPT .bin file "
        "(uint16, or uint32 when its name says so), a datasets directory (save_to_disk, "
        "column input_ids) or a .jsonl file (field text) with --tokenizer. Read on the "
        "workers (checked here first); nothing is downloaded. Default: synthetic tokens.",
        show_default=False,
    ),
]
TokenizerOption = Annotated[
    str | None,
    typer.Option(
        "--tokenizer",
        help="A Hugging Face tokenizer.json (or its folder) for a .jsonl --data file, run in "
        "the loader as a script reading raw text does. Read on the workers, like --data.",
        show_default=False,
    ),
]


def data_request(path: str | None, tokenizer: str | None = None) -> dict[str, str] | None:
    """--data (and --tokenizer) as the request's `data` field: absolute paths (the workers'
    working directory is not this shell's)."""
    from pathlib import Path

    if path is None:
        if tokenizer is not None:
            raise typer.BadParameter("--tokenizer goes with a .jsonl --data file; give --data")
        return None
    request = {"path": str(Path(path).expanduser().resolve())}
    if tokenizer is not None:
        request["tokenizer"] = str(Path(tokenizer).expanduser().resolve())
    return request


# --------------------------------------------------------------------------- errors

# Terminal escape sequences (CSI `ESC [ ... m`, OSC `ESC ] ... BEL` that sets titles or links,
# two-byte `ESC x`), then any C0/C1 control byte and the bidi/format characters that reorder
# text. Study names, error messages and params come from other users and from workers.
_ESCAPES = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]"
)


def safe(value: Any) -> str:
    """Text from outside (a study name, an error message) as it may reach a terminal: escape
    sequences and control characters stripped, line breaks and tabs made spaces, Rich markup
    escaped. Every renderer passes such text through here."""
    from rich.markup import escape

    text = _ESCAPES.sub("", str(value)).replace("\t", " ").replace("\r", " ").replace("\n", " ")
    return escape(text)


def friendly_errors(fn: F) -> F:
    """Turn the errors a user can fix into one clear line and exit code 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if not _user_facing(exc):
                raise
            err.print(f"[bold red]error:[/] {safe(exc)}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def _user_facing(exc: Exception) -> bool:
    from autotuner.errors import UserError

    if isinstance(exc, UserError):
        return True
    # Checked only if already imported: a command talking to the service never loads SQLAlchemy.
    for module, name in (
        ("autotuner.storage.common", "StudyNotFound"),
        ("autotuner.storage.session", "DatabaseUnavailable"),
        ("autotuner.study.operations", "NotFound"),
    ):
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(exc, getattr(loaded, name)):
            return True
    return False


def as_flags(message: str) -> str:
    """A message about options (`options.max_mem_gib`) in the words of the flags (`--max-mem-gib`).

    The same checks serve the API (options.x) and these commands (--x)."""
    message = re.sub(r"\bglobal_batch_tokens\b", "--global-batch", message)
    message = re.sub(r"\bgpus_per_trial\b", "--gpus", message)
    message = re.sub(r"\bdata\.path\b", "--data", message)
    message = re.sub(r"\bdata\.tokenizer\b", "--tokenizer", message)
    # Only the option's name: "headroom" is also a word in messages.
    message = re.sub(r"(?:\boptions\.|^)headroom\b", "--headroom", message)
    message = re.sub(r"(?:\boptions\.)?\bproxy_layers\b", "--proxy-layers", message)
    return re.sub(
        r"(?:options\.)?\b(usd_per_gpu_hour|planned_tokens|planned_hours|max_mem_gib)\b",
        lambda m: "--" + m.group(1).replace("_", "-"),
        message,
    )


# The request's fields as `tune` and `submit` spell them; options.x is --x (see as_flags).
FLAGS = {
    "gpus_per_trial": "--gpus",
    "max_trials": "--trials",
    "max_minutes": "--minutes",
    "objective": "--objective",
    "sampler": "--sampler",
    "seed": "--seed",
    "name": "--name",
    "global_batch_tokens": "--global-batch",
    "data": "--data",
}


def study_request(**fields: Any) -> StudyRequest:
    """A study request from a command's flags, checked by the rules the API applies to a
    submitted one (`StudyRequest`); errors name the flag (`--sampler`, `--max-mem-gib`)."""
    from pydantic import ValidationError

    from autotuner.inputs import UserError, describe_validation_error
    from autotuner.study.request import StudyRequest

    try:
        return StudyRequest.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        if first["type"] in ("enum", "literal_error"):  # a flag with a fixed set of values
            expected = re.findall(r"'([^']*)'", first["ctx"]["expected"])
            message = f"{field} {first['input']!r}: choose one of {', '.join(expected)}"
        else:
            message = describe_validation_error(exc)
        if field in FLAGS:
            message = FLAGS[field] + message.removeprefix(field)
        raise UserError(as_flags(message)) from None


def option_pairs(pairs: list[str] | None) -> dict[str, Any]:
    """`--option KEY=VALUE` as study options: each KEY a StudyOptions field without a flag
    of its own, given once; each VALUE read as a YAML scalar (0, 0.5, false) and checked with
    the rest of the options (study_options, study_request)."""
    import yaml
    from pydantic import ValidationError

    from autotuner.inputs import UserError
    from autotuner.options import StudyOptions

    known = [k for k in StudyOptions.model_fields if k not in FLAGGED_OPTIONS]
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = (part.strip() for part in pair.partition("="))
        if not sep or not key or not value:
            raise UserError(f"--option {pair!r}: give KEY=VALUE, e.g. --option remeasure_top=0")
        if key in FLAGGED_OPTIONS:
            raise UserError(f"--option {key}: it has a flag of its own, --{key.replace('_', '-')}")
        if key not in known:
            raise UserError(f"--option {key}: no such option; the options are {', '.join(known)}")
        if key in out:
            raise UserError(f"--option {key}: given twice")
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            out[key] = value  # not a scalar YAML reads: the option's own check says what is wrong
        try:
            StudyOptions.model_validate({key: out[key]})
        except ValidationError as exc:
            raise UserError(f"--option {key}={value}: {exc.errors()[0]['msg']}") from None
    return out


def study_options(**values: Any) -> StudyOptions:
    """The options a command's flags set, validated; errors name the flag (`--max-mem-gib`)."""
    from pydantic import ValidationError

    from autotuner.inputs import UserError, describe_validation_error
    from autotuner.options import StudyOptions

    try:
        return StudyOptions.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        raise UserError(as_flags(describe_validation_error(exc))) from None


# --------------------------------------------------------------------------- databases


def open_db_for_writing(db_url: str | None) -> Database:
    """The results database, reachable and migrated to this version's schema."""
    from autotuner.storage.session import Database, resolve_database_url, upgrade_database

    url = resolve_database_url(db_url)
    db = Database(url)
    db.check()
    upgrade_database(url)
    return db


def short_lived() -> None:
    """For a verb that reads, prints and exits (`status`, `best`, `trials`, `export`): no
    cyclic garbage collection in this process. Its imports (SQLAlchemy, pydantic, the models)
    allocate a few hundred thousand objects, most of them for good, and the collector walked
    them again and again (a tenth of a cold read); what a read leaves is freed at its exit.
    Not for a verb that runs on (`tune`, `serve`, `best --watch`)."""
    import gc

    gc.disable()


def backend(server: str | None, db: str | None) -> Backend:
    """The service (`--server`) or the local database (`--db`), behind one interface."""
    from autotuner.cli.client import connect

    return connect(server, db)
