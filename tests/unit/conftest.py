"""A finished study in a migrated SQLite file, for the CLI's read verbs."""

from __future__ import annotations

import pytest

from autotuner.executors.replay import Landscape, ReplayExecutor
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.session import Database
from autotuner.study.coordinator import StudyRunner, create_study
from autotuner.study.events import OnEvent
from tests.fakes import synthetic_landscape

KNOBS = {
    "micro_batch_size": [8, 16, 32, 64, 128],
    "precision": ["fp32", "bf16"],
    "checkpointing": ["none", "full"],
}


def replay_study(url: str, landscape: Landscape, on_event: OnEvent | None = None) -> str:
    """The id of a 10-trial study over KNOBS, run to its end on `landscape`'s results."""
    db = Database(url)
    space = parse_space(
        {"name": "cli", "knobs": KNOBS, "fixed": {"attention": "flash", "compile_mode": "default"}}
    )
    study_id = create_study(
        db, model=ModelSpec.resolve({"preset": "tiny"}), space=space, max_trials=10
    )
    executor = ReplayExecutor(landscape, list(KNOBS))
    StudyRunner(db, study_id, executor, poll_s=0, on_event=on_event).run()
    return study_id


@pytest.fixture
def finished_study(sqlite_url: str) -> tuple[str, str]:
    """(database URL, study id) of a study replayed to the end (some trials OOM)."""
    return sqlite_url, replay_study(sqlite_url, synthetic_landscape(KNOBS))
