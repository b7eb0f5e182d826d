"""The service's edge: the token guards reads too (unless public reads), is checked before the
body is read, browsers sign in once; links are paths; every response has the security headers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from autotuner.api.app import ServiceSettings, create_app
from autotuner.storage.session import Database
from tests.unit.test_cli_errors import run_cli

TOKEN = "edge-token-7c1e"
HTML = {"accept": "text/html"}


def _client(url: str, **settings: object) -> Iterator[TestClient]:
    app = create_app(ServiceSettings(db_url=url, coordinator=False, migrate=False, **settings))  # type: ignore[arg-type]
    with TestClient(app, follow_redirects=False) as client:
        yield client


@pytest.fixture
def service(study: tuple[Database, str]) -> Iterator[tuple[TestClient, str]]:
    db, study_id = study
    for client in _client(db.url, token=TOKEN):
        yield client, study_id


def test_reads_need_the_token(service: tuple[TestClient, str]) -> None:
    client, study_id = service
    bearer = {"authorization": f"Bearer {TOKEN}"}
    for path in ("/api/studies", f"/api/studies/{study_id}/best", "/openapi.json"):
        refused = client.get(path)
        assert refused.status_code == 401 and "token" in refused.json()["detail"], path
        assert refused.headers["www-authenticate"] == "Bearer"
        assert client.get(path, headers=bearer).status_code == 200, path
    assert (
        client.get(f"/api/studies/{study_id}", headers={"authorization": "Bearer no"}).status_code
        == 401
    )
    assert client.get("/healthz").status_code == 200  # for orchestrators
    assert client.get("/static/dashboard.js").status_code == 200  # no data in assets


def test_the_token_is_checked_before_the_body(service: tuple[TestClient, str]) -> None:
    client, _ = service
    json_type = {"content-type": "application/json"}
    assert client.post("/api/studies", content=b"{not json", headers=json_type).status_code == 401
    assert client.post("/api/studies", content=b"[1]", headers=json_type).status_code == 401


def test_public_reads_are_an_opt_in(study: tuple[Database, str]) -> None:
    db, study_id = study
    for client in _client(db.url, token=TOKEN, public_reads=True):
        assert client.get(f"/api/studies/{study_id}").status_code == 200
        assert client.get("/", headers=HTML).status_code == 200
        assert client.post(f"/api/studies/{study_id}/cancel").status_code == 401


def test_a_browser_signs_in_once_with_a_read_only_cookie(service: tuple[TestClient, str]) -> None:
    client, study_id = service
    page = f"/studies/{study_id}"
    to_login = client.get(page, headers=HTML)
    assert to_login.status_code == 303 and to_login.headers["location"].startswith("/login?next=")
    form = client.get(to_login.headers["location"])
    assert form.status_code == 200 and 'name="token"' in form.text

    wrong = client.post(f"/login?next={page}", data={"token": "guess"})
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    assert "autotuner_session" not in client.cookies
    signed_in = client.post(f"/login?next={page}", data={"token": TOKEN})
    assert signed_in.status_code == 303 and signed_in.headers["location"] == page
    cookie = signed_in.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
    assert client.get(page, headers=HTML).status_code == 200
    assert client.get(f"{page}?format=json").status_code == 200  # the page's live refresh
    # The cookie reads; it cannot change anything (a page can't be made to cancel a study).
    assert client.post(f"/api/studies/{study_id}/cancel").status_code == 401
    # Only paths on this site after signing in.
    away = client.post("/login?next=//evil.example/x", data={"token": TOKEN})
    assert away.headers["location"] == "/"


def test_pages_link_by_path_whatever_the_host_headers(study: tuple[Database, str]) -> None:
    db, study_id = study
    for client in _client(db.url):
        forged = {"host": "evil.example", "x-forwarded-host": "evil.example", **HTML}
        for path in ("/", f"/studies/{study_id}", f"/studies/{study_id}/trials/0", "/login"):
            page = client.get(path, headers=forged)
            assert page.status_code == 200 and "evil.example" not in page.text, path
        assert '<script src="/static/chart.umd.min.js">' in client.get("/").text


def test_every_response_has_the_security_headers(service: tuple[TestClient, str]) -> None:
    client, study_id = service
    bearer = {"authorization": f"Bearer {TOKEN}"}
    responses = [
        client.get("/api/studies"),  # 401
        client.get("/api/studies", headers=bearer),
        client.get(f"/studies/{study_id}", headers=HTML),  # 303
        client.get("/login"),
        client.get("/healthz"),
        client.get("/static/dashboard.css"),
        client.get("/api/studies/st-nope", headers=bearer),  # 404
        client.get("/docs", headers=bearer),  # Swagger UI, served from here: no inline script
        client.get("/static/apidocs/swagger-ui-bundle.js"),
    ]
    for r in responses:
        csp = r.headers.get("content-security-policy", "")
        assert "script-src 'self';" in csp and "style-src 'self';" in csp, r.url
        assert "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["x-content-type-options"] == "nosniff"


def test_api_docs_need_the_token_and_serve_only_their_own_assets(
    service: tuple[TestClient, str],
) -> None:
    client, _ = service
    bearer = {"authorization": f"Bearer {TOKEN}"}
    assert client.get("/docs").status_code == 401
    assert client.get("/docs", headers=bearer).status_code == 200
    # The assets are public, like the dashboard's; the names are a fixed list, not a path.
    assert client.get("/static/apidocs/swagger-ui.css").status_code == 200
    assert client.get("/static/apidocs/..%2F..%2Fapp.py").status_code == 404
    assert client.get("/static/apidocs/docs.py").status_code == 404
    redoc = client.get("/redoc", headers=bearer)
    # ReDoc inserts <style> elements: only its page allows inline styles; scripts stay 'self'.
    assert "script-src 'self';" in redoc.headers["content-security-policy"]
    assert "style-src 'self' 'unsafe-inline'" in redoc.headers["content-security-policy"]


@pytest.mark.parametrize("token", ["", "abc", "x" * 31])
def test_serve_beyond_localhost_needs_a_strong_token(tmp_path: Path, token: str) -> None:
    """No token, or one short enough to guess (issue 42: `abc` was accepted), is refused with
    what to run instead, before anything is written."""
    db = f"sqlite:///{tmp_path / 'r.db'}"
    proc = run_cli("serve", "--host", "0.0.0.0", "--db", db, env={"AUTOTUNER_TOKEN": token})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:") and "AUTOTUNER_TOKEN" in lines[0]
    assert "openssl rand -hex 32" in lines[0]
    assert not (tmp_path / "r.db").exists()
