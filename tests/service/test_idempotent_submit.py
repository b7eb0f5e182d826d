"""`POST /api/studies` with an Idempotency-Key records one study however often it is retried
(issue 38: with the study's COMMIT reply dropped, the client got 503 "retry", retried, and two
identical studies ran).

In process on the real Postgres for the answers; then the real `autotuner serve` on a database
link that loses the study's COMMIT acknowledgement (tests/faults/pgproxy.py), driven by the real
`autotuner submit`, which sends a key and retries with it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from autotuner.api.app import ServiceSettings, create_app
from autotuner.storage.session import dispose_engines
from tests.faults.pgproxy import PgProxy
from tests.service.conftest import TOKEN, Service, db_counts, study_body
from tests.service.test_cli import cli

pytestmark = pytest.mark.postgres

KEY = "Idempotency-Key"


@pytest.fixture
def api(pg_url: str) -> Iterator[TestClient]:
    settings = ServiceSettings(db_url=pg_url, token=TOKEN, coordinator=False, migrate=False)
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield client


def test_a_repeated_submit_with_one_key_returns_the_first_study(
    api: TestClient, pg_url: str
) -> None:
    first = api.post("/api/studies", json=study_body(), headers={KEY: "k-1"})
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    again = api.post("/api/studies", json=study_body(), headers={KEY: "k-1"})
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert db_counts(pg_url) == (1, 0)
    # Another key, or none, is another study.
    assert api.post("/api/studies", json=study_body(), headers={KEY: "k-2"}).status_code == 201
    assert api.post("/api/studies", json=study_body()).status_code == 201
    assert db_counts(pg_url) == (3, 0)


def test_the_same_key_with_another_body_or_a_malformed_key_is_refused(
    api: TestClient, pg_url: str
) -> None:
    first = api.post("/api/studies", json=study_body(), headers={KEY: "k-1"})
    other = api.post("/api/studies", json=study_body(max_trials=9), headers={KEY: "k-1"})
    assert other.status_code == 422
    detail = other.json()["detail"]
    assert "was used for a different request" in detail and first.json()["id"] in detail
    assert "send a new key" in detail
    bad = api.post("/api/studies", json=study_body(), headers={KEY: "x" * 201})
    assert bad.status_code == 422 and "1 to 200 visible ASCII" in bad.json()["detail"]
    assert db_counts(pg_url) == (1, 0)


def test_submit_retried_after_a_lost_commit_reply_makes_one_study(
    pg_url: str,
    landscape_file: Path,
    start_service: Callable[..., Service],
    tmp_path: Path,
) -> None:
    url = make_url(pg_url)
    proxy = PgProxy(url.host or "127.0.0.1", url.port or 5432).start()
    try:
        service = start_service(
            proxy.url(pg_url), executor=f"replay:{landscape_file}", args=["--no-coordinator"]
        )
        proxy.lose_commit_ack(after=b"INSERT INTO studies")
        (tmp_path / "tiny.yaml").write_text("preset: tiny\n")
        proc = cli(
            "submit", str(tmp_path / "tiny.yaml"), "--server", service.url, "--trials", "2",
            "--space", "cpu-demo",
        )  # fmt: skip
        assert proxy.acks_lost == 1, "the fault was not injected"
        assert proc.returncode == 0, proc.stderr
        assert db_counts(pg_url) == (1, 0)
        stored = service.client.get("/api/studies").json()
        assert [s["id"] for s in stored] == [proc.stdout.strip()]
        assert "database unavailable during POST /api/studies" in service.log()
    finally:
        proxy.stop()
        dispose_engines()
