"""Recording a new study: the row a coordinator later picks up."""

from __future__ import annotations

from autotuner.options import StudyOptions
from autotuner.search.objective import Objective
from autotuner.search.space import SearchSpace
from autotuner.spec import ModelSpec
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo


def study_name(name: str | None, model: ModelSpec, space: SearchSpace) -> str:
    """The name a study is stored under: the one asked for, else its model and space's."""
    return name or f"{model.preset or model.family.value} / {space.name}"


def create_study(
    db: Database,
    *,
    model: ModelSpec,
    space: SearchSpace,
    name: str | None = None,
    objective: Objective = Objective.TOKENS_PER_S,
    max_trials: int | None = None,
    max_minutes: float | None = None,
    gpus_per_trial: int = 1,
    sampler: str = "tpe",
    seed: int = 0,
    options: StudyOptions | None = None,
    device_type: str | None = None,
    submit_key: str | None = None,
    submit_digest: str | None = None,
) -> str:
    """Record a new study (status queued) and return its id. `device_type`: what its trials
    will run on (`cuda` or `cpu`) when the cluster is known at submit."""
    if max_trials is None and max_minutes is None:
        raise ValueError("a study needs a budget: give max_trials, max_minutes or both")
    with db.session() as s:
        study = StudyRepo(s).create(
            name=study_name(name, model, space),
            model_spec=model.model_dump(mode="json"),
            space=space.model_dump(mode="json", by_alias=True),
            objective=objective.value,
            max_trials=max_trials,
            max_minutes=max_minutes,
            gpus_per_trial=gpus_per_trial,
            sampler=sampler,
            seed=seed,
            options=options,
            device_type=device_type,
            submit_key=submit_key,
            submit_digest=submit_digest,
        )
        return study.id
