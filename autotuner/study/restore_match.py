"""Whether a new `tune` asks for the interrupted study of its name, and how it differs if not.

`tune` names a study after its model and space (or `--name`). Run again after a Ctrl-C, the
same command means "go on": where the newest study of that name in the database is
`interrupted`, `tune` resumes it rather than start another. Only a request that asks for the
same study does so: its model, space (with any `--data` and `--global-batch` folded in),
objective, budget, GPUs per trial, sampler, seed and options as stored; anything else would run
the old study under settings it was not started with, or a new one under a taken name, so the
command is refused with each difference named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotuner.search.space import SearchSpace
from autotuner.spec import ModelSpec
from autotuner.status import StudyStatus
from autotuner.storage.models import Study
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.study.create import study_name
from autotuner.study.request import StudyRequest

# The request's own fields, compared one by one (the model, space and options by their keys).
_PLAIN = ("objective", "max_trials", "max_minutes", "gpus_per_trial", "sampler", "seed")


@dataclass(frozen=True)
class Difference:
    """One setting the stored study and the request disagree on: `field` is dotted
    (`max_trials`, `space.measure.min_repeat_s`, `options.headroom`); None where unset."""

    field: str
    stored: Any
    asked: Any


@dataclass(frozen=True)
class Namesake:
    """The newest study named as the request's would be, found `interrupted`."""

    id: str
    name: str
    differences: list[Difference] = field(default_factory=list)


def interrupted_namesake(
    db: Database, req: StudyRequest, model: ModelSpec, space: SearchSpace
) -> Namesake | None:
    """The interrupted study a `tune` of the validated `req` (`model`, `space`) would continue,
    with what differs between the two; None where the newest study of its name is not
    interrupted (or there is none): then the request is a new study."""
    name = study_name(req.name, model, space)
    with db.read() as s:
        study = StudyRepo(s).newest_named(name)
        if study is None or study.status != StudyStatus.INTERRUPTED:
            return None
        return Namesake(study.id, study.name, differences(study, req, model, space))


def differences(
    study: Study, req: StudyRequest, model: ModelSpec, space: SearchSpace
) -> list[Difference]:
    """Each setting of `study` that the request asks otherwise, in the order `tune` lists its
    flags: model, space, then the budget and search settings, then the options."""
    asked_space = space.model_dump(mode="json", by_alias=True)
    stored_space = dict(study.space)
    if space.global_batch_from_expert and not space.global_batch_tokens:
        # The coordinator fixes this global batch at the start and stores it in the space
        # (restore.hold_expert_global_batch): the request cannot know it, and asks the same.
        stored_space.pop("global_batch_tokens", None)
        asked_space.pop("global_batch_tokens", None)
    found = _compare("model", study.model_spec, model.model_dump(mode="json"))
    found += _compare("space", stored_space, asked_space)
    for name in _PLAIN:
        stored, asked = getattr(study, name), getattr(req, name)
        asked = getattr(asked, "value", asked)  # the objective is an enum in the request
        if stored != asked:
            found.append(Difference(name, stored, asked))
    found += _compare("options", _options(study.options), _options(req.options))
    return found


def _options(options: Any) -> dict[str, Any]:
    # Whole, defaults included: an option left at its default is named with its value.
    return dict(options.model_dump(mode="json"))


def _compare(path: str, stored: Any, asked: Any) -> list[Difference]:
    """The leaves where two JSON values differ, mappings walked key by key (a list is one
    value: a knob's choices differ as a whole)."""
    if isinstance(stored, dict) and isinstance(asked, dict):
        out: list[Difference] = []
        for key in sorted(set(stored) | set(asked), key=str):
            out += _compare(f"{path}.{key}", stored.get(key), asked.get(key))
        return out
    return [] if stored == asked else [Difference(path, stored, asked)]
