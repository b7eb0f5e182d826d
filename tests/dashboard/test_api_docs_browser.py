"""/docs (Swagger UI) and /redoc render in headless Chromium with no network beyond the service:
their scripts and styles are served by the service itself, under its Content-Security-Policy."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from autotuner.api.app import ServiceSettings, create_app
from tests.dashboard.test_dashboard_browser import _serve, dump_dom

pytestmark = pytest.mark.browser


@pytest.fixture
def service(sqlite_url: str) -> Iterator[tuple[str, list[str]]]:
    app = create_app(ServiceSettings(db_url=sqlite_url, coordinator=False))
    paths = sorted(app.openapi()["paths"])
    for base in _serve(app):
        yield base, paths


def _console_problems(stderr: str) -> list[str]:
    return [
        line
        for line in stderr.splitlines()
        if "CONSOLE" in line and re.search(r"Content Security Policy|Failed to load|Error", line)
    ]


def test_swagger_ui_renders_every_operation_offline(service: tuple[str, list[str]]) -> None:
    base, paths = service
    proc = dump_dom(f"{base}/docs", virtual_ms=8000)
    dom = proc.stdout
    shown = set(re.findall(r'data-path="([^"]+)"', dom))
    assert shown == set(paths), proc.stderr[-3000:]
    assert 'class="opblock-summary-method">POST<' in dom
    # The page itself names no other host, and nothing it loaded broke the CSP or failed.
    html = dom[: dom.index('<div id="swagger-ui"')]
    assert "http" not in html
    assert not _console_problems(proc.stderr)


def test_redoc_renders_offline(service: tuple[str, list[str]]) -> None:
    base, _ = service
    proc = dump_dom(f"{base}/redoc", virtual_ms=8000)
    dom = proc.stdout
    assert "Submit a study" in dom, proc.stderr[-3000:]
    assert "Something went wrong" not in dom
    # ReDoc's "powered by" logo is an image on its own CDN: the CSP blocks it, harmlessly.
    problems = [p for p in _console_problems(proc.stderr) if "cdn.redoc.ly" not in p]
    assert not problems
