"""What a token holder may make the service read or run (docs/trust-model.md, issue 38):
against the real `autotuner serve`, over HTTP, a tokenizer outside the data directories is
refused with the same bytes whether it exists or not, and a model factory runs only from the
operator's factory directories, refused at submit (never as a trial failure)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.service.conftest import Service, db_counts, study_body

pytestmark = pytest.mark.postgres

SIZES = {"n_layer": 2, "d_model": 64, "n_head": 4, "vocab_size": 512, "seq_len": 32}


@pytest.fixture
def service(
    pg_url: str, landscape_file: Path, start_service: Callable[..., Service], tmp_path: Path
) -> Service:
    for name in ("data", "models", "outside"):
        (tmp_path / name).mkdir()
    (tmp_path / "data" / "corpus.jsonl").write_text('{"text": "hello"}\n')
    (tmp_path / "models" / "mine.py").write_text("def build(**kw): ...\n")
    return start_service(
        pg_url,
        executor=f"replay:{landscape_file}",
        args=["--no-coordinator", "--data-dir", str(tmp_path / "data")],
        env={"AUTOTUNER_FACTORY_DIRS": str(tmp_path / "models")},
    )


def test_an_outside_tokenizer_gets_byte_identical_refusals_existing_or_not(
    service: Service, tmp_path: Path, pg_url: str
) -> None:
    corpus = str(tmp_path / "data" / "corpus.jsonl")
    tokenizer = tmp_path / "outside" / "tokenizer.json"
    asked = [
        str(tokenizer),
        f"{tmp_path / 'data'}/../outside/tokenizer.json",
        "/etc/passwd",  # exists, and is no tokenizer
    ]

    def answers() -> list[tuple[int, bytes]]:
        out = []
        for path in asked:
            body = study_body(data={"path": corpus, "tokenizer": path})
            response = service.client.post("/api/studies", json=body)
            out.append((response.status_code, response.content))
        return out

    absent = answers()
    tokenizer.write_text('{"version": "1.0", "model": {"type": "WordLevel", "vocab": {}}}')
    present = answers()
    assert present[:2] == absent[:2]  # byte for byte: nothing says whether it exists
    for status, content in present:
        assert status == 422
        assert b"data.tokenizer" in content and b"not under a directory this service" in content
    assert db_counts(pg_url) == (0, 0)


def test_factories_run_only_from_the_operator_directories(
    service: Service, tmp_path: Path, pg_url: str
) -> None:
    hostile = [
        # The issue's: any importable callable taking keyword arguments, or any file.
        {"factory": "sympy:simplify", "factory_args": {"expr": "__import__('os').system('id')"}},
        {"factory": "os:system"},
        {"factory": f"{tmp_path / 'outside'}/x.py:build"},
        {"factory": f"{tmp_path / 'models'}/../outside/x.py:build"},
    ]
    for model in hostile:
        response = service.client.post("/api/studies", json=study_body(model={**model, **SIZES}))
        assert response.status_code == 422, response.text
        detail = response.json()["detail"]
        assert "not model code under a directory this service runs code from" in detail
        assert "--factory-dir DIR" in detail, detail
    assert db_counts(pg_url) == (0, 0)
    inside = {"factory": "mine:build", "factory_root": "/", **SIZES}
    accepted = service.client.post("/api/studies", json=study_body(model=inside))
    assert accepted.status_code == 201, accepted.text
    stored = service.client.get(f"/api/studies/{accepted.json()['id']}").json()["model"]
    # Pinned to where the service found it; the caller's own factory_root is not kept.
    assert stored["factory_root"] == os.path.realpath(tmp_path / "models")
    assert f"model code only from {tmp_path / 'models'}" in service.log()
