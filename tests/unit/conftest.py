"""A finished study in a migrated SQLite file, for the CLI's read verbs."""

from __future__ import annotations

import pytest

from autotuner.executors.replay import ReplayExecutor
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.session import Database
from autotuner.study.coordinator import StudyRunner, create_study
from tests.fakes import synthetic_landscape

KNOBS = {
    "micro_batch_size": [8, 16, 32, 64, 128],
    "precision": ["fp32", "bf16"],
    "checkpointing": ["none", "full"],
}


@pytest.fixture
def finished_study(sqlite_url: str) -> tuple[str, str]:
    """(database URL, study id) of a study replayed to the end (some trials OOM)."""
    db = Database(sqlite_url)
    space = parse_space(
        {"name": "cli", "knobs": KNOBS, "fixed": {"attention": "flash", "compile_mode": "default"}}
    )
    study_id = create_study(
        db, model=ModelSpec.resolve({"preset": "tiny"}), space=space, max_trials=10
    )
    StudyRunner(
        db, study_id, ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS)), poll_s=0
    ).run()
    return sqlite_url, study_id
