"""The study page in a real headless Chromium: the charts are drawn by the page's JavaScript,
and the page follows a running study live (a trial added after the page loaded shows up in the
table, the recommendation card and the progress line without a reload)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
from sqlalchemy import update

from autotuner.search.objective import Objective
from autotuner.storage.models import Study, StudyStatus, TrialState
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study import operations
from autotuner.study.live import store_live_best
from tests.dashboard.conftest import make_app
from tests.fakes import measured
from tests.polling import wait_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _serve(app: Any) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    wait_for(lambda: srv.started, 20, "the dashboard server to start", every_s=0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)


def dump_dom(url: str, *, virtual_ms: int = 4000) -> subprocess.CompletedProcess[str]:
    """The page's DOM after `virtual_ms` of (virtual) time in headless Chromium, with no network
    beyond this machine (the pages must work on a cluster without internet access); the page's
    console messages, CSP violations included, are in the result's stderr."""
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI installs chromium for this test (.ci/run); it is missing")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                "--enable-logging=stderr",
                "--v=0",
                f"--user-data-dir={profile}",
                f"--virtual-time-budget={virtual_ms}",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=90,
        )


@pytest.fixture
def server(study: tuple[Database, str]) -> Iterator[tuple[str, str]]:
    db, study_id = study
    for base in _serve(make_app(db)):
        yield base, study_id


def test_charts_render_in_chromium(server: tuple[str, str]) -> None:
    base, study_id = server
    proc = dump_dom(f"{base}/studies/{study_id}")
    dom = proc.stdout
    assert study_id in dom, proc.stderr[-2000:]
    # progress + pareto + one chart per searched knob (2) = 4 charts drawn by dashboard.js
    assert 'data-charts="4"' in dom, proc.stderr[-2000:]


def _after_first_page(app: Any, action: Callable[[], None]) -> Any:
    """`app`, running `action` once, right after it has served the first HTML page."""
    done = threading.Event()

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        await app(scope, receive, send)
        page = scope["type"] == "http" and "format=json" not in scope["query_string"].decode()
        if page and scope["path"].startswith("/studies/") and not done.is_set():
            done.set()
            action()

    return wrapped


def test_a_running_study_page_updates_live(study: tuple[Database, str]) -> None:
    db, study_id = study
    with db.session() as s:  # the replayed study, as if it were still running
        s.execute(
            update(Study).where(Study.id == study_id).values(status=StudyStatus.RUNNING.value)
        )
    before = operations.get_best(db, study_id)["best"]
    assert before is not None

    def the_best_measured_again() -> None:  # what the coordinator writes when a trial finishes
        with db.session() as s:
            trials = TrialRepo(s)
            row = trials.create_running(study_id, params=before["params"], config={})
            value = before["tokens_per_s"] * 3
            trials.finish(row, TrialState.COMPLETE, result=measured(value), objective_value=value)
        store_live_best(db, study_id, Objective.TOKENS_PER_S)

    with db.read() as s:
        new_number = TrialRepo(s).count(study_id)
    app = _after_first_page(make_app(db), the_best_measured_again)
    for base in _serve(app):
        # Virtual time: the page's 5 s poll runs within the budget, in a second of real time.
        proc = dump_dom(f"{base}/studies/{study_id}", virtual_ms=12_000)
    dom = proc.stdout
    after = operations.get_best(db, study_id)["best"]
    study = operations.get_study(db, study_id)
    assert after is not None and after["measurements"] == before["measurements"] + 1
    assert f'data-trials="{new_number + 1}"' in dom, proc.stderr[-2000:]
    assert f'data-number="{new_number}"' in dom  # its row in the table
    # The recommendation card (its config measured once more) and the progress line.
    assert f'<b id="best-measurements">{after["measurements"]}</b>' in dom
    assert f"{study['trial_counts']['complete']} complete" in dom


def test_the_trials_table_names_a_failure_class_once(study: tuple[Database, str]) -> None:
    """The policy writes some reasons with their class in front ("dominated: checkpointing=full
    only recomputes; ..."): the table shows them as they are, as `autotuner trials` does,
    not as "dominated: dominated: ...", and prefixes the class to those without it."""
    db, study_id = study
    with db.session() as s:
        trials = TrialRepo(s)
        best = operations.get_best(db, study_id)["best"]
        assert best is not None
        for cls, message in (
            ("dominated", "dominated: checkpointing=full only recomputes"),
            ("oom", "predicted out of memory: needs 189 GiB"),
        ):
            trials.create_pruned(
                study_id,
                params=best["params"],
                config={},
                error_class=cls,
                error_message=message,
            )
    for base in _serve(make_app(db)):
        proc = dump_dom(f"{base}/studies/{study_id}")
    dom = proc.stdout
    assert ">dominated: checkpointing=full only recomputes<" in dom, proc.stderr[-2000:]
    assert "dominated: dominated:" not in dom
    assert ">oom: predicted out of memory: needs 189 GiB<" in dom
