"""A cancelled study's page in headless Chromium: its best is shown as the best so far, not as
a recommendation, with how far it got, and without the commands that apply it to a trainer
(the CLI's `best` and `export` say the same: tests/unit/test_cli_output.py).

The study is replayed through the real coordinator and cancelled through the real operation
while its runner holds it, a few trials in."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autotuner.executors.replay import ReplayExecutor
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.session import Database
from autotuner.study import cancel, operations
from autotuner.study.coordinator import StudyRunner, create_study
from tests.browser import Browser
from tests.dashboard.conftest import KNOBS, make_app
from tests.dashboard.test_dashboard_browser import _serve
from tests.fakes import synthetic_landscape

pytestmark = pytest.mark.browser


def _cancelled_after(db: Database, completed: int, max_trials: int) -> str:
    study_id = create_study(
        db,
        model=ModelSpec.resolve({"preset": "tiny"}),
        space=parse_space({"name": "cancel-me", "knobs": KNOBS}),
        max_trials=max_trials,
        name="cancel-me",
    )
    runner = StudyRunner(db, study_id, ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS)))
    runner.start()
    for _ in range(200):
        counts = operations.get_study(db, study_id)["trial_counts"]
        if counts.get("complete", 0) >= completed:
            break
        runner.step()
    cancel.cancel_study(db, study_id)
    while not runner.done:  # the runner sees the cancel at its next step and stops its trials
        runner.step()
    return study_id


@pytest.fixture
def served(sqlite_url: str) -> Iterator[tuple[str, str, str]]:
    """The base URL, a study cancelled after 3 of 10 trials, and a finished one."""
    db = Database(sqlite_url)
    cancelled = _cancelled_after(db, 3, 10)
    finished = create_study(
        db,
        model=ModelSpec.resolve({"preset": "tiny"}),
        space=parse_space({"name": "done", "knobs": KNOBS}),
        max_trials=4,
        name="done",
    )
    StudyRunner(db, finished, ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS))).run()
    for base in _serve(make_app(db)):
        yield base, cancelled, finished


def _card(browser: Browser, url: str) -> dict[str, object]:
    browser.open(url)
    browser.wait_for("document.getElementById('best-body').children.length > 0")
    return browser.eval(
        """({title: document.getElementById('best-title').textContent,
             note: document.getElementById('best-unfinished')?.textContent ?? null,
             apply: document.getElementById('export-commands') !== null,
             tps: document.getElementById('best-tps')?.textContent ?? null})"""
    )


def test_a_cancelled_study_shows_its_best_so_far_not_a_recommendation(served) -> None:
    base, cancelled, finished = served
    with Browser() as browser:
        card = _card(browser, f"{base}/studies/{cancelled}")
        assert card["title"] == "Best so far (not a recommendation)", card
        note = str(card["note"])
        assert f"study {cancelled} was cancelled after" in note and "of 10 trials" in note, note
        assert "not a finished search's recommendation" in note
        assert card["tps"], card  # the best so far is still shown, with its numbers
        assert card["apply"] is False, card  # nothing to paste into a trainer
        # The state the page shows is the study's, and the page's data says the same.
        assert browser.eval("document.getElementById('status').textContent") == "cancelled"

        done = _card(browser, f"{base}/studies/{finished}")
        assert done["title"] == "Recommendation" and done["note"] is None, done
        assert done["apply"] is True, done
        assert not browser.errors, browser.errors
