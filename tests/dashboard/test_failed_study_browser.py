"""A failed study's page in headless Chromium: the one line that says why it failed, where the
recommendation would be (study/ending.py; the CLI's `best` and `status` say the same).

The study is run through the real coordinator on a ReplayExecutor whose worker cannot import
the model's package: it stops at its first trial."""

from __future__ import annotations

import pytest

from autotuner.storage.session import Database
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


def test_a_failed_study_page_says_why_in_one_line(sqlite_url: str) -> None:
    from autotuner.spec import FailureClass, TrialResult

    db = Database(sqlite_url)
    study_id, _ = _run(db, TrialResult.failure(FailureClass.ENVIRONMENT, MISSING))
    for base in _serve(make_app(db)):
        with Browser() as browser:
            browser.open(f"{base}/studies/{study_id}")
            browser.wait_for("document.getElementById('best-none') !== null")
            said = browser.eval("document.getElementById('best-none').textContent")
            assert said.startswith("The study failed: the worker's environment"), said
            assert "pip install transformers" in said, said
            assert browser.eval("document.getElementById('status').textContent") == "failed"
            assert browser.eval("document.getElementById('export-commands')") is None
            assert not browser.errors, browser.errors
