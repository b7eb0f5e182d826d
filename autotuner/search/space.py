"""Search spaces: declarative, validated YAML (or JSON) naming knobs and their domains.

A space is data, not code, so a user can submit their own over the API. Schema:

    name: single-gpu-quick            # required
    description: one line
    knobs:                            # knob -> domain; knob names are the fields of spec.Knobs
      micro_batch_size: [4, 8, 16]    # a list: categorical
      grad_accum: {low: 1, high: 8, log: true}   # an int range (log spacing optional)
      precision: {values: [bf16, fp32]}           # a categorical, long form
    fixed: {checkpointing: none}      # knob values every trial uses (not searched)
    defaults: {precision: bf16}       # the expert default (a seed); unset knobs take the
                                      # first value of their domain
    global_batch_tokens: 524288       # optional: keep the global batch fixed; grad_accum is
                                      # derived as global / (micro_batch * seq_len * gpus)
    global_batch_from_expert: 4       # or: hold the expert default's micro-batch x 4 steps
                                      # x seq_len x gpus, fixed when the study starts
    rules:                            # extra "impossible combination" rules for this space
      - if: {attention: [flash]}
        then: {precision: [fp16, bf16]}
        why: flash attention needs fp16 or bf16
    measure: {repeats: 3, min_repeat_s: 1.0}     # MeasureSettings overrides, the data too:
                                      # {data_source: loader} or {data: {path: /abs/x.bin}}

A measurement setting (a MeasureSettings field such as data_source) under knobs, fixed,
defaults or rules is refused with the fix: it is not something the training run chooses.

Every value is checked against the knob's type in `spec.Knobs`, so an unknown knob or a value
outside its domain fails on load with a message naming the field.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from autotuner.inputs import (
    UserError,
    check_printable,
    describe_validation_error,
    read_structured_file,
)
from autotuner.spec import Knobs, MeasureSettings, ModelSpec


class SpaceError(UserError):
    """A search space that cannot be used; the message says what to fix."""


class IntRange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    low: int
    high: int
    log: bool = False
    step: int = 1

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        if self.log and self.low < 1:
            raise ValueError("a log range needs low >= 1")
        if self.log and self.step != 1:
            raise ValueError("a log range cannot have a step")
        return self


class Rule(BaseModel):
    """If the trial's knobs match every `if` entry, they must match every `then` entry."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    if_: dict[str, list[Any]] = Field(alias="if")
    then: dict[str, list[Any]]
    why: str

    def violated_by(self, knobs: dict[str, Any]) -> bool:
        applies = all(
            _as_str(knobs.get(k)) in {_as_str(v) for v in vs} for k, vs in self.if_.items()
        )
        if not applies:
            return False
        return not all(
            _as_str(knobs.get(k)) in {_as_str(v) for v in vs} for k, vs in self.then.items()
        )


def _as_str(value: Any) -> str:
    return str(getattr(value, "value", value))


class SearchSpace(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    description: str = ""
    knobs: dict[str, list[Any] | IntRange]
    fixed: dict[str, Any] = Field(default_factory=dict)
    defaults: dict[str, Any] = Field(default_factory=dict)
    global_batch_tokens: int | None = Field(default=None, gt=0)
    # Hold the global batch at the expert default's: its micro-batch (which depends on the
    # model and the GPU's memory, search/seeding.py) x this many accumulation steps x seq_len x
    # GPUs. Fixed once, when the study starts (the coordinator writes global_batch_tokens).
    global_batch_from_expert: int | None = Field(default=None, ge=1, le=1024)
    rules: list[Rule] = Field(default_factory=list)
    measure: MeasureSettings = Field(default_factory=MeasureSettings)

    @field_validator("name")
    @classmethod
    def _printable(cls, value: str) -> str:
        check_printable(value)  # shown in the CLI and the dashboard, to other users too
        return value

    @field_validator("knobs", mode="before")
    @classmethod
    def _long_form(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out: dict[str, Any] = {}
        for name, domain in value.items():
            if isinstance(domain, dict) and set(domain) == {"values"}:
                domain = domain["values"]
            elif isinstance(domain, dict):
                try:
                    domain = IntRange.model_validate(domain)
                except ValidationError as exc:
                    raise ValueError(f"{name}: {describe_validation_error(exc)}") from None
            elif not isinstance(domain, list):
                raise ValueError(f"{name}: give a list of values or a {{low, high}} range")
            out[name] = domain
        return out

    @model_validator(mode="after")
    def _check_knobs(self) -> SearchSpace:
        known = Knobs.knob_names()
        if not self.knobs:
            raise ValueError("knobs: a space needs at least one knob to search")
        for section in ("knobs", "fixed", "defaults"):
            for name, value in getattr(self, section).items():
                _refuse_measure_setting(f"{section}.{name}", name, value)
                if name not in known:
                    raise ValueError(
                        f"{section}.{name}: unknown knob; known knobs: {', '.join(known)}"
                    )
        for name, domain in self.knobs.items():
            if name in self.fixed:
                raise ValueError(f"knobs.{name}: also in fixed; a knob is either searched or fixed")
            if isinstance(domain, list):
                if not domain:
                    raise ValueError(f"knobs.{name}: empty list; give at least one value")
                if len({_as_str(v) for v in domain}) != len(domain):
                    raise ValueError(f"knobs.{name}: repeated values in {domain}")
                for v in domain:
                    _check_value(f"knobs.{name}", name, v)
            else:
                _check_value(f"knobs.{name}.low", name, domain.low)
                _check_value(f"knobs.{name}.high", name, domain.high)
        for name, v in self.fixed.items():
            _check_value(f"fixed.{name}", name, v)
        for name, v in self.defaults.items():
            _check_value(f"defaults.{name}", name, v)
            dom = self.knobs.get(name)
            if isinstance(dom, list) and _as_str(v) not in {_as_str(d) for d in dom}:
                raise ValueError(f"defaults.{name}: {v!r} is not one of knobs.{name} {dom}")
            if isinstance(dom, IntRange) and not dom.low <= v <= dom.high:
                raise ValueError(f"defaults.{name}: {v} is outside [{dom.low}, {dom.high}]")
        for held in ("global_batch_tokens", "global_batch_from_expert"):
            if getattr(self, held) and "grad_accum" in {*self.knobs, *self.fixed}:
                raise ValueError(
                    f"{held} derives grad_accum; remove grad_accum from knobs/fixed or drop {held}"
                )
        for i, rule in enumerate(self.rules):
            for part, mapping in (("if", rule.if_), ("then", rule.then)):
                for name, values in mapping.items():
                    _refuse_measure_setting(f"rules[{i}].{part}.{name}", name, values)
                    if name not in known:
                        raise ValueError(f"rules[{i}].{part}.{name}: unknown knob")
                    for v in values:
                        _check_value(f"rules[{i}].{part}.{name}", name, v)
        return self

    # ------------------------------------------------------------------ use

    def seed_params(self) -> dict[str, Any]:
        """The expert default: `defaults`, else each domain's first value (low for ranges)."""
        out: dict[str, Any] = {}
        for name, domain in self.knobs.items():
            if name in self.defaults:
                out[name] = self.defaults[name]
            elif isinstance(domain, list):
                out[name] = domain[0]
            else:
                out[name] = domain.low
        return out

    def knobs_for(self, params: dict[str, Any], model: ModelSpec, num_gpus: int) -> Knobs:
        """The full knob set for a trial: fixed values, then searched params, then derived ones."""
        values: dict[str, Any] = {**self.fixed, **params}
        if self.global_batch_tokens:
            mb = int(values.get("micro_batch_size", Knobs().micro_batch_size))
            per_step = mb * model.seq_len * max(num_gpus, 1)
            values["grad_accum"] = max(1, self.global_batch_tokens // per_step)
        return Knobs.model_validate(values)

    def expert_global_batch(self, expert: Knobs, model: ModelSpec, num_gpus: int) -> int | None:
        """The global batch `global_batch_from_expert` holds, for the expert default's knobs;
        None when the space holds none this way (or holds one already)."""
        if not self.global_batch_from_expert or self.global_batch_tokens:
            return None
        ranks = max(num_gpus, 1)
        # The expert's own accumulation: `global_batch_from_expert` steps, or 1 where those
        # steps' gradients do not fit (study/restore.py hold_expert_global_batch).
        return expert.micro_batch_size * expert.grad_accum * model.seq_len * ranks

    def global_batch_mismatch(self, knobs: Knobs, model: ModelSpec, num_gpus: int) -> str | None:
        """Why these knobs do not run exactly the space's global batch (None: they do, or the
        space sets none). The global batch is held, never rounded: an inexact config is a
        different training run, and comparing it with the others would not be fair."""
        if not self.global_batch_tokens:
            return None
        ranks = max(num_gpus, 1)
        ran = knobs.micro_batch_size * model.seq_len * knobs.grad_accum * ranks
        if ran == self.global_batch_tokens:
            return None
        return (
            f"micro_batch_size {knobs.micro_batch_size} x seq_len {model.seq_len} x {ranks} "
            f"GPU(s) does not divide the global batch of {self.global_batch_tokens:,} tokens "
            f"(grad_accum {knobs.grad_accum} would run {ran:,}); it is held exactly, not "
            "rounded: pick micro-batches that divide it"
        )

    def violated_rule(self, knobs: Knobs) -> Rule | None:
        flat = knobs.model_dump(mode="json")
        for rule in self.rules:
            if rule.violated_by(flat):
                return rule
        return None

    def size(self) -> int | None:
        """Number of configurations in the space (None when a range makes it large)."""
        total = 1
        for domain in self.knobs.values():
            if isinstance(domain, list):
                total *= len(domain)
            else:
                total *= (domain.high - domain.low) // domain.step + 1 if not domain.log else 0
                if total == 0:
                    return None
        return total


def _refuse_measure_setting(where: str, name: str, value: Any) -> None:
    """A measurement setting (data_source, repeats...) is not a knob: the training run being
    tuned never chooses it, so it must not be searched, fixed beside the knobs or exported."""
    if name not in MeasureSettings.model_fields:
        return
    if isinstance(value, IntRange):
        value = value.low
    elif isinstance(value, list):
        value = value[0] if value else "..."
    raise ValueError(
        f"{where}: {name} is a measurement setting, not a knob (a training run does not choose "
        f"it); put it in the measure section instead: `measure: {{{name}: {_as_str(value)}}}`"
    )


def _check_value(where: str, knob: str, value: Any) -> None:
    try:
        Knobs.model_validate({knob: value})
    except ValidationError as exc:
        msg = exc.errors()[0]["msg"]
        raise ValueError(f"{where}: {value!r} is not a valid {knob}: {msg}") from None


# ---------------------------------------------------------------------- loading


def spaces_dir() -> Path:
    """Built-in spaces ship in the repo's search_spaces/ (override with AUTOTUNER_SPACES_DIR)."""
    env = os.environ.get("AUTOTUNER_SPACES_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "search_spaces"


def builtin_space_names() -> list[str]:
    return sorted(p.stem for p in spaces_dir().glob("*.yaml"))


def parse_space(data: Any, *, source: str = "space") -> SearchSpace:
    """Validate a mapping as a SearchSpace; errors name the field and the fix."""
    if not isinstance(data, dict):
        raise SpaceError(f"{source}: a search space must be a mapping with name and knobs")
    try:
        return SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise SpaceError(f"{source}: {describe_validation_error(exc)}") from None


def load_space(name_or_path: str) -> SearchSpace:
    """Load a built-in space by name (e.g. `cpu-demo`) or a YAML/JSON file by path."""
    path = Path(name_or_path)
    if not path.exists():
        candidate = spaces_dir() / f"{name_or_path}.yaml"
        if not candidate.exists():
            raise SpaceError(
                f"no search space {name_or_path!r}: not a file, and not a built-in "
                f"(built-ins: {', '.join(builtin_space_names())})"
            )
        path = candidate
    try:
        return parse_space(read_structured_file(path), source=str(path))
    except SpaceError as exc:
        # Point at the offending field's line in the file when the message names a field.
        detail = str(exc).removeprefix(f"{path}: ")
        line = field_line(path.read_text(), detail.split(":", 1)[0])
        if line is None:
            raise
        raise SpaceError(f"{path}: line {line}: {detail}") from None


def field_line(text: str, dotted: str) -> int | None:
    """The 1-based line of a field such as `knobs.precision` or `rules[0].if.attention` in a
    YAML/JSON document (the deepest part of the path found), or None."""
    import re

    import yaml

    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    parts = [p for p in re.split(r"\.|\[(\d+)\]", dotted) if p]
    line = None
    for part in parts:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == part), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            node = node.value[int(part)]
            line = node.start_mark.line + 1
        else:
            break
    return line
