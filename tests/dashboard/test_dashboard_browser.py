"""The study page in a real headless Chromium: the charts are drawn by the page's JavaScript."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading

import pytest
import uvicorn

from tests.dashboard.conftest import make_app
from tests.polling import wait_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def server(study):
    db, study_id = study
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    config = uvicorn.Config(make_app(db), host="127.0.0.1", port=port, log_level="warning")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    wait_for(lambda: srv.started, 20, "the dashboard server to start", every_s=0.05)
    yield f"http://127.0.0.1:{port}", study_id
    srv.should_exit = True
    thread.join(10)


def test_charts_render_in_chromium(server) -> None:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI installs chromium for this test (.ci/run); it is missing")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    base, study_id = server
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
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
                f"--user-data-dir={profile}",
                "--virtual-time-budget=4000",
                "--dump-dom",
                f"{base}/studies/{study_id}",
            ],
            capture_output=True,
            text=True,
            timeout=90,
        )
    dom = proc.stdout
    assert study_id in dom, proc.stderr[-2000:]
    # progress + pareto + one chart per searched knob (2) = 4 charts drawn by dashboard.js
    assert 'data-charts="4"' in dom, proc.stderr[-2000:]
