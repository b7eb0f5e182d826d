"""Shared set-up for the search tests: a real coordinator on a real (migrated) database, driven
against a ReplayExecutor over a fake landscape whose memory behaves like a GPU's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from autotuner.executors.base import Target
from autotuner.executors.replay import Landscape, ReplayExecutor
from autotuner.options import StudyOptions
from autotuner.search.objective import Objective
from autotuner.search.policy import SearchPolicy
from autotuner.search.space import SearchSpace, parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.models import Trial
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import StudyRunner, create_study
from tests.fakes import FAKE_H200, physical_landscape

GPT2 = ModelSpec.resolve({"preset": "gpt2-124m"})
H200 = Target.from_fingerprint(FAKE_H200)
KNOBS = {
    "micro_batch_size": [8, 16, 32, 64, 128, 256],
    "precision": ["bf16", "fp32"],
    "attention": ["flash", "efficient", "math"],
    "compile_mode": ["none", "default"],
    "checkpointing": ["none", "full"],
}
FIXED = {"vocab_pad_multiple": 64}


def make_policy(
    space: SearchSpace,
    *,
    model: ModelSpec = GPT2,
    target: Target = H200,
    gpus: int = 1,
    **options: Any,
) -> SearchPolicy:
    """A study's SearchPolicy for tokens/s, with these StudyOptions (no database needed)."""
    return SearchPolicy(
        space=space,
        model=model,
        target=target,
        gpus_per_trial=gpus,
        objective=Objective.TOKENS_PER_S,
        options=StudyOptions(**options),
    )


def gpt2_space(knobs: dict[str, list[Any]] | None = None, **extra: Any) -> SearchSpace:
    return parse_space({"name": "search-test", "knobs": knobs or KNOBS, "fixed": FIXED, **extra})


def gpt2_landscape(knobs: dict[str, list[Any]] | None = None) -> Landscape:
    return physical_landscape(GPT2, knobs or KNOBS, fixed=FIXED)


@pytest.fixture
def db(sqlite_url: str) -> Database:
    return Database(sqlite_url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_db(request: pytest.FixtureRequest) -> Database:
    """Each test once on SQLite and once on Postgres."""
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    return Database(url)


Run = Callable[..., tuple[StudyRunner, ReplayExecutor, list[Trial], dict[str, Any] | None]]


@pytest.fixture
def run_study() -> Run:
    """Run one study to completion; returns (runner, executor, trials, recommendation)."""

    def run(
        db: Database,
        *,
        space: SearchSpace | None = None,
        landscape: Landscape | None = None,
        model: ModelSpec = GPT2,
        target: Target = H200,
        trials: int = 30,
        sampler: str = "tpe",
        seed: int = 0,
        options: StudyOptions | dict[str, Any] | None = None,
        noise_rel: float = 0.0,
        objective: Any = None,
    ) -> tuple[StudyRunner, ReplayExecutor, list[Trial], dict[str, Any] | None]:
        space = space or gpt2_space()
        kwargs = {"objective": objective} if objective is not None else {}
        study_id = create_study(
            db,
            model=model,
            space=space,
            max_trials=trials,
            sampler=sampler,
            seed=seed,
            options=options
            if isinstance(options, StudyOptions)
            else StudyOptions(**(options or {})),
            **kwargs,
        )
        executor = ReplayExecutor(
            landscape or gpt2_landscape(),
            list(space.knobs),
            target=target,
            noise_rel=noise_rel,
            seed=seed,
        )
        runner = StudyRunner(db, study_id, executor, poll_s=0.0)
        runner.run()
        with db.session() as s:
            rows = TrialRepo(s).list(study_id)
            rec = StudyRepo(s).require(study_id).recommendation
            s.expunge_all()
        return runner, executor, rows, rec

    return run
