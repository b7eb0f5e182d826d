"""Reading user input files (model specs, spaces) with errors that say what to fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from autotuner.errors import UserError as UserError
from autotuner.spec import ModelSpec


def read_structured_file(path: Path) -> Any:
    """Read YAML or JSON; a syntax error names the file and line."""
    import yaml  # here: the CLI's reads import this module and never parse YAML

    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    try:
        if path.suffix == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise UserError(f"{path}:{where} malformed YAML: {problem}") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: line {exc.lineno}: malformed JSON: {exc.msg}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """The first error of a pydantic validation, as `field: what to fix`."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown field; remove it or check its spelling"
    elif err["type"] == "missing":
        msg = "missing; it is required"
    return f"{loc}: {msg}" if loc else msg


def parse_model_spec(data: Any, *, source: str = "model spec") -> ModelSpec:
    if isinstance(data, dict) and set(data) == {"model"}:
        data = data["model"]
    if not isinstance(data, dict):
        raise UserError(f"{source}: a model spec must be a mapping (e.g. `preset: gpt2-124m`)")
    try:
        return ModelSpec.resolve(data)
    except ValidationError as exc:
        hint = ""
        if "preset" not in data and exc.errors()[0]["type"] == "missing":
            hint = " (or start from a preset, e.g. `preset: gpt2-124m`)"
        raise UserError(f"{source}: {describe_validation_error(exc)}{hint}") from None
    except ValueError as exc:
        raise UserError(f"{source}: {exc}") from None


def load_model_spec(path: str | Path) -> ModelSpec:
    """A model spec from a YAML/JSON file, or a preset name such as `gpt2-124m`."""
    p = Path(path)
    if not p.exists():
        from autotuner.presets import MODEL_PRESETS

        if str(path) in MODEL_PRESETS:
            return ModelSpec.resolve({"preset": str(path)})
        raise UserError(
            f"{path}: no such file (or preset); give a YAML/JSON model spec or one of "
            f"the presets: {', '.join(MODEL_PRESETS)}"
        )
    spec = parse_model_spec(read_model_spec_file(p), source=str(p))
    return _check_factory_file(spec, p) if spec.factory else spec


def read_model_spec_file(path: Path) -> Any:
    """A model spec file's data, with an `hf_config` that names a file replaced by that file's
    contents (read here, relative to the spec file's folder): what leaves the client is the
    config.json mapping, never a path the service would have to open. A `factory` file given
    relative is made absolute from the same folder (`tune` and `submit` alike)."""
    data = read_structured_file(path)
    inner = data.get("model") if isinstance(data, dict) and set(data) == {"model"} else data
    if isinstance(inner, dict) and isinstance(inner.get("hf_config"), str):
        inner["hf_config"] = _read_hf_config_file(inner["hf_config"], path)
    if isinstance(inner, dict) and isinstance(inner.get("factory"), str):
        inner["factory"] = _factory_beside_spec(inner["factory"], path)
    return data


def _factory_beside_spec(factory: str, spec_path: Path) -> str:
    """A `file.py:function` factory whose file is relative, made absolute from the spec file's
    folder: the trial process runs in another directory, and for `submit` the service reads
    the spec elsewhere still. Checked to exist here, where the error can name the spec file.
    A module path, or an absolute file (for `submit` it may be on the service's machine
    only), is left as it is."""
    location, _, function = factory.rpartition(":")
    file = Path(location).expanduser()
    if not location.endswith(".py") or file.is_absolute():
        return factory
    file = (spec_path.parent / file).resolve()
    if not file.is_file():
        raise UserError(
            f"{spec_path}: factory file {location} not found (looked at {file}); a relative "
            "path is read from the spec file's folder"
        )
    return f"{file}:{function}"


def _read_hf_config_file(name: str, spec_path: Path) -> dict[str, Any]:
    file = Path(name).expanduser()
    if not file.is_absolute():
        file = spec_path.parent / file
    where = f"{spec_path}: hf_config file {name}"
    try:
        text = file.read_text()
    except FileNotFoundError:
        raise UserError(
            f"{where} not found (looked at {file.resolve()}); a relative path is read from the "
            "spec file's folder"
        ) from None
    except OSError as exc:
        raise UserError(f"{where}: cannot read it ({exc.strerror})") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{where}: line {exc.lineno}: malformed JSON: {exc.msg}; it must be the model's "
            "config.json as Hugging Face publishes it"
        ) from None
    if not isinstance(config, dict):
        raise UserError(
            f"{where} holds a JSON {type(config).__name__}, not an object; it must be the "
            "model's config.json (a mapping with model_type, hidden_size, ...)"
        )
    return config


def _check_factory_file(spec: ModelSpec, spec_path: Path) -> ModelSpec:
    """`tune` runs the factory here: an absolute `file.py` must exist here too (a relative one
    was made absolute and checked as the file was read, `_factory_beside_spec`)."""
    assert spec.factory is not None
    location = spec.factory.rpartition(":")[0]
    if not location.endswith(".py"):
        return spec  # a module path: imported on the worker, which may have other packages
    if not Path(location).expanduser().is_file():
        raise UserError(f"{spec_path}: factory file {location} not found")
    return spec


def check_printable(text: str) -> None:
    """Refuse control and format characters (ESC, BEL, bidi overrides...): names (a study's, a
    search space's) are printed in other users' terminals and pages."""
    import unicodedata

    for i, ch in enumerate(text):
        if unicodedata.category(ch).startswith("C"):
            raise ValueError(
                f"contains the control character U+{ord(ch):04X} at position {i}; "
                "use printable text only"
            )
