"""Dashboard fixtures: an app over a real (SQLite) database holding a finished replayed study."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from autotuner import dashboard
from autotuner.api.security import SecurityHeaders
from autotuner.executors.replay import ReplayExecutor
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.session import Database
from autotuner.study.coordinator import StudyRunner, create_study
from tests.fakes import synthetic_landscape

KNOBS = {"micro_batch_size": [8, 16, 32, 64, 128], "precision": ["fp32", "bf16"]}


def make_app(db: Database) -> FastAPI:
    app = FastAPI()
    app.add_middleware(SecurityHeaders)  # the service's CSP: the pages must work under it
    app.state.db = db
    app.include_router(dashboard.router)
    app.mount("/static", dashboard.static, name="static")
    return app


@pytest.fixture
def study(sqlite_url: str) -> tuple[Database, str]:
    db = Database(sqlite_url)
    space = parse_space({"name": "dash", "knobs": KNOBS})
    study_id = create_study(
        db, model=ModelSpec.resolve({"preset": "tiny"}), space=space, max_trials=10
    )
    executor = ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS))
    StudyRunner(db, study_id, executor, poll_s=0).run()
    return db, study_id
