"""The service reads a study's data only under its operator's directories (issue 12).

In process (the app with no coordinator) on the real Postgres for the answers to each kind of
path; then the real `autotuner serve` process for --data-dir and $AUTOTUNER_DATA_DIRS."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from autotuner.api.app import ServiceSettings, create_app
from autotuner.study.data_access import DataAccess
from tests.service.conftest import TOKEN, Service, db_counts, study_body
from tests.service.test_cli import cli

pytestmark = pytest.mark.postgres

OUTSIDE = "not under a directory this service reads data from"


def _tokens(path: Path, n: int = 400) -> Path:
    (np.arange(n, dtype=np.uint16) % 512).tofile(path)  # tiny: vocab 512, seq_len 64
    return path


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    _tokens(allowed / "train.bin")
    return {"allowed": allowed, "outside": outside}


def _client(pg_url: str, access: DataAccess) -> TestClient:
    settings = ServiceSettings(
        db_url=pg_url, token=TOKEN, coordinator=False, migrate=False, data_access=access
    )
    return TestClient(create_app(settings), headers={"Authorization": f"Bearer {TOKEN}"})


@pytest.fixture
def api(pg_url: str, dirs: dict[str, Path]) -> Iterator[TestClient]:
    with _client(pg_url, DataAccess.under([dirs["allowed"]])) as client:
        yield client


def _submit(client: TestClient, path: str | Path, **body: Any) -> Any:
    return client.post("/api/studies", json=study_body(data={"path": str(path)}, **body))


def test_a_path_inside_an_allowed_directory_is_accepted(
    api: TestClient, dirs: dict[str, Path]
) -> None:
    response = _submit(api, dirs["allowed"] / "train.bin")
    assert response.status_code == 201, response.text
    # Inside, the file's own problems are said plainly: that is what the directory is for.
    (dirs["allowed"] / "odd.bin").write_bytes(b"\1" * 301)
    odd = _submit(api, dirs["allowed"] / "odd.bin")
    assert odd.status_code == 422 and "301 bytes is not a whole number" in odd.json()["detail"]
    missing = _submit(api, dirs["allowed"] / "nope.bin")
    assert missing.status_code == 422 and "no such file" in missing.json()["detail"]


def test_outside_escaping_and_linked_paths_are_refused_and_nothing_is_written(
    api: TestClient, dirs: dict[str, Path], pg_url: str
) -> None:
    secret = _tokens(dirs["outside"] / "secret.bin")
    (dirs["allowed"] / "link.bin").symlink_to(secret)
    (dirs["allowed"] / "up").symlink_to(dirs["outside"], target_is_directory=True)
    paths = [
        secret,
        f"{dirs['allowed']}/../outside/secret.bin",
        dirs["allowed"] / "link.bin",
        dirs["allowed"] / "up" / "secret.bin",
        "/etc/passwd",
    ]
    for path in paths:
        response = _submit(api, path)
        assert response.status_code == 422, (path, response.text)
        detail = response.json()["detail"]
        assert OUTSIDE in detail and str(dirs["allowed"]) in detail, detail
        assert "autotuner serve --data-dir DIR" in detail and "AUTOTUNER_DATA_DIRS" in detail
    # The same path in an inline space's measure section is held to the same directories.
    space = {**study_body()["space"], "measure": {"data": {"path": str(secret)}}}
    inline = api.post("/api/studies", json=study_body(space=space))
    assert inline.status_code == 422 and OUTSIDE in inline.json()["detail"]
    assert db_counts(pg_url) == (0, 0)


def test_the_refusal_says_nothing_about_whether_an_outside_path_exists(
    api: TestClient, dirs: dict[str, Path]
) -> None:
    target = dirs["outside"] / "maybe.bin"
    link = dirs["allowed"] / "maybe.bin"
    link.symlink_to(target)
    asked = [target, link, f"{dirs['allowed']}/../outside/maybe.bin"]
    absent = [(_submit(api, p).status_code, _submit(api, p).json()) for p in asked]
    _tokens(target)  # now it exists, is readable and is valid data
    present = [(_submit(api, p).status_code, _submit(api, p).json()) for p in asked]
    assert absent == present
    assert {status for status, _ in present} == {422}


def test_a_service_with_no_directory_refuses_data_and_says_how_to_allow_it(
    pg_url: str, dirs: dict[str, Path]
) -> None:
    with _client(pg_url, DataAccess.nowhere()) as client:
        refused = _submit(client, dirs["allowed"] / "train.bin")
        assert refused.status_code == 422
        detail = refused.json()["detail"]
        assert "allowed no data directory" in detail and "--data-dir DIR" in detail
        assert _submit(client, "/nonexistent/x.bin").json() == refused.json()
        assert client.post("/api/studies", json=study_body()).status_code == 201  # no data


def test_serve_takes_its_directories_from_flags_and_the_environment(
    pg_url: str,
    landscape_file: Path,
    start_service: Callable[..., Service],
    dirs: dict[str, Path],
    tmp_path: Path,
) -> None:
    second = tmp_path / "second"
    second.mkdir()
    _tokens(second / "more.bin")
    service = start_service(
        pg_url,
        executor=f"replay:{landscape_file}",
        args=["--data-dir", str(dirs["allowed"]), "--no-coordinator"],
        env={"AUTOTUNER_DATA_DIRS": str(second)},
    )
    client = service.client
    for inside in (dirs["allowed"] / "train.bin", second / "more.bin"):
        response = client.post("/api/studies", json=study_body(data={"path": str(inside)}))
        assert response.status_code == 201, response.text
    outside = _tokens(dirs["outside"] / "x.bin")
    response = client.post("/api/studies", json=study_body(data={"path": str(outside)}))
    assert response.status_code == 422 and OUTSIDE in response.json()["detail"]
    assert f"user data only under {dirs['allowed']}, {second}" in service.log()
    # `submit --server --data` shows the service's refusal as one line with the remedy.
    (tmp_path / "tiny.yaml").write_text("preset: tiny\n")
    proc = cli(
        "submit", str(tmp_path / "tiny.yaml"), "--server", service.url, "--trials", "2",
        "--data", str(outside),
    )  # fmt: skip
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert OUTSIDE in lines[0] and "--data-dir DIR" in lines[0]


def test_serve_refuses_to_start_on_a_data_directory_that_is_not_there(
    pg_url: str, tmp_path: Path
) -> None:
    service = Service(pg_url, tmp_path / "bad.log", args=["--data-dir", str(tmp_path / "typo")])
    with pytest.raises(RuntimeError, match="no such directory; create it, or fix the path"):
        service.start(timeout_s=60)
