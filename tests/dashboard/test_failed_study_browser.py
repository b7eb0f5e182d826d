"""A failed study's page in headless Chromium: the one line that says why it failed, large, where
the recommendation would be (study/ending.py; the CLI's `best` and `status` say the same), no
empty charts under it (issue 42), and its trials table where it has trials.

The study is run through the real coordinator on a ReplayExecutor whose worker cannot import
the model's package: it stops at its first trial."""

from __future__ import annotations

import pytest

from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.status import StudyStatus
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.study.coordinator import create_study
from tests.browser import Browser
from tests.coordinator.test_study_ends import _run
from tests.dashboard.conftest import make_app
from tests.dashboard.test_dashboard_browser import _serve

pytestmark = pytest.mark.browser

MISSING = (
    "the worker cannot import transformers (ModuleNotFoundError: No module named "
    "'transformers'), which family 'hf' needs: pip install transformers in the workers' "
    "Python environment"
)
DRAWN = "document.body.dataset.charts !== undefined && document.body.dataset.trials"


def test_a_failed_study_page_says_why_and_draws_no_empty_chart(sqlite_url: str) -> None:
    from autotuner.spec import FailureClass, TrialResult

    db = Database(sqlite_url)
    study_id, _ = _run(db, TrialResult.failure(FailureClass.ENVIRONMENT, MISSING))
    for base in _serve(make_app(db)):
        with Browser() as browser:
            browser.open(f"{base}/studies/{study_id}", ready=DRAWN)
            said = browser.eval("document.getElementById('best-none').textContent")
            assert said.startswith("The worker's environment cannot run this study"), said
            assert "pip install transformers" in said, said
            # Said large, in a card marked as a failure, under its own title.
            assert browser.eval("document.getElementById('best-none').className") == "failure"
            assert browser.eval("document.getElementById('best').classList.contains('error')")
            title = browser.eval("document.getElementById('best-title').textContent")
            assert title == "The study failed"
            assert browser.eval("document.getElementById('status').textContent") == "failed"
            assert browser.eval("document.getElementById('export-commands')") is None
            # Nothing was measured: no chart at all, not empty axes.
            assert browser.eval("document.querySelectorAll('canvas').length") == 0
            assert browser.eval("document.getElementById('charts')") is None
            assert browser.eval("document.getElementById('effects-card')") is None
            assert browser.eval("document.body.dataset.charts") == "0"
            # Its trials are listed, each with its own outcome.
            total = int(browser.eval("document.body.dataset.trials"))
            assert total > 0
            rows = browser.eval("document.querySelectorAll('#trials tbody tr').length")
            assert rows == total
            errors = browser.eval(
                "[...document.querySelectorAll('#trials td.err')].map((td) => td.title)"
            )
            # The first failed on the missing package; the other running was cancelled with it.
            assert any("cannot import transformers" in e for e in errors), errors
            assert len(errors) == total, errors
            # The progress line counts each state as the table labels it: the cancelled trial
            # is no second failure.
            labels = browser.eval(
                "[...document.querySelectorAll('#trials tbody tr span.state')]"
                ".map((s) => s.textContent)"
            )
            assert sorted(labels) == ["cancelled", "failed"], labels
            shown = ", ".join(f"{labels.count(k)} {k}" for k in sorted(set(labels)))
            progress = browser.eval("document.getElementById('progress-text').textContent")
            assert f"({shown})" in progress, progress
            assert not browser.errors, browser.errors


def test_a_study_that_failed_before_any_trial_shows_only_its_reason(sqlite_url: str) -> None:
    """No trial at all (it failed as it started): no chart, and no empty trials table."""
    db = Database(sqlite_url)
    space = parse_space({"name": "s", "knobs": {"micro_batch_size": [1, 2]}})
    study_id = create_study(
        db, model=ModelSpec.resolve({"preset": "tiny"}), space=space, max_trials=4
    )
    reason = "no config of the space fits this GPU's memory: try a smaller micro_batch_size"
    with db.session() as s:
        repo = StudyRepo(s)
        repo.set_status(repo.require(study_id), StudyStatus.FAILED, error_message=reason)
    for base in _serve(make_app(db)):
        with Browser() as browser:
            browser.open(f"{base}/studies/{study_id}", ready=DRAWN)
            said = browser.eval("document.getElementById('best-none').textContent")
            assert said == reason[0].upper() + reason[1:]
            assert browser.eval("document.querySelectorAll('canvas').length") == 0
            assert browser.eval("document.getElementById('trials-card')") is None
            assert not browser.errors, browser.errors
