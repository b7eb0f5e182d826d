"""The real service process on the real Postgres, trials answered by the ReplayExecutor."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.polling import wait_for
from tests.service.conftest import (
    REPLAY_SPACE,
    Service,
    db_counts,
    free_port,
    study_body,
)

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def service(
    pg_database: str, landscape_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    """One service for the module: replay trials, 2 slots, each trial 'takes' 0.2 s."""
    log = tmp_path_factory.mktemp("service") / "service.log"
    svc = Service(pg_database, log, executor=f"replay:{landscape_file}?slots=2&delay_s=0.2")
    svc.start()
    yield svc
    svc.stop()


def quiet_counts(service: Service) -> tuple[int, int]:
    """(studies, trials) once no study of the service is queued or running: a study an earlier
    test on this service left running still adds trials, which is not what a test that
    compares counts before and after a refused call is about (under pytest-xdist the earlier
    test can be any of the module's)."""

    def quiet() -> bool:
        listed = service.client.get("/api/studies", params={"limit": 1000}).json()
        statuses = [s["status"] for s in listed]
        return not {"queued", "running"} & set(statuses)

    wait_for(quiet, 60, "the service's studies to finish")
    return db_counts(service.db_url)


def _finished(client: httpx.Client, study_id: str) -> Callable[[], Any]:
    def check() -> Any:
        view = client.get(f"/api/studies/{study_id}").json()
        return view if view["status"] in ("completed", "cancelled", "failed") else None

    return check


def test_submit_run_and_read_back(service: Service) -> None:
    client = service.client
    response = client.post("/api/studies", json=study_body(name="api-roundtrip", max_trials=6))
    assert response.status_code == 201, response.text
    study = response.json()
    assert study["status"] in ("queued", "running") and study["space"] == "service-replay"
    done = wait_for(_finished(client, study["id"]), 60, "the study to finish")
    assert done["status"] == "completed"

    trials = client.get(f"/api/studies/{study['id']}/trials").json()
    assert [t["number"] for t in trials] == list(range(len(trials)))
    assert sum(t["state"] != "pruned" for t in trials) == 6
    one = client.get(f"/api/studies/{study['id']}/trials/0").json()
    assert one["purpose"] == "expert-default" and one["config"]["knobs"]["micro_batch_size"] == 16
    assert one["result"]["status"] == "ok"

    best = client.get("/api/studies/api-roundtrip/best").json()  # by name works too
    assert best["best"]["objective_value"] == max(t["objective_value"] or 0 for t in trials)

    exported = {
        fmt: client.get(f"/api/studies/{study['id']}/export", params={"format": fmt})
        for fmt in ("json", "yaml", "env", "torchrun", "torchtitan")
    }
    assert all(r.status_code == 200 for r in exported.values())
    assert json.loads(exported["json"].text)["knobs"] == best["best"]["knobs"]
    assert yaml.safe_load(exported["yaml"].text)["trial"] == best["best"]["trial_number"]
    assert "AUTOTUNER_" not in exported["env"].text  # real NCCL/torch variables only
    assert exported["torchtitan"].headers["content-type"].startswith("application/toml")
    mb = best["best"]["knobs"]["micro_batch_size"]
    assert f"local_batch_size = {mb}" in exported["torchtitan"].text
    assert "torchrun --standalone --nproc-per-node 1 -m workers.trial" in exported["torchrun"].text

    listed = client.get("/api/studies").json()
    assert study["id"] in [s["id"] for s in listed]
    schema = client.get("/openapi.json").json()
    assert "/api/studies/{study}/cancel" in schema["paths"]
    assert client.get("/healthz").json()["database"] == "ok"


def test_cancel_needs_the_token_and_stops_the_study(service: Service) -> None:
    client = service.client
    study = client.post("/api/studies", json=study_body(max_trials=500)).json()
    wait_for(
        lambda: client.get(f"/api/studies/{study['id']}").json()["trial_counts"],
        30,
        "a first trial",
    )
    anonymous = httpx.post(f"{service.url}/api/studies/{study['id']}/cancel")
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"] == "Bearer"
    assert client.get(f"/api/studies/{study['id']}").json()["status"] == "running"

    cancelled = client.post(f"/api/studies/{study['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"

    def settled() -> bool:
        counts = client.get(f"/api/studies/{study['id']}").json()["trial_counts"]
        return "running" not in counts

    wait_for(settled, 30, "the cancelled study's trials to stop")
    assert client.get(f"/api/studies/{study['id']}").json()["status"] == "cancelled"
    again = client.post(f"/api/studies/{study['id']}/cancel")
    assert again.status_code == 409 and "already cancelled" in again.json()["detail"]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": "Basic dGVzdA=="},
        {"Authorization": "Bearer x"},
    ],
    ids=["none", "wrong", "basic", "short"],
)
def test_mutating_calls_without_the_token_get_401_and_write_nothing(
    service: Service, headers: dict[str, str]
) -> None:
    before = quiet_counts(service)
    response = httpx.post(f"{service.url}/api/studies", json=study_body(), headers=headers)
    assert response.status_code == 401
    assert "token" in response.json()["detail"]
    # A bad body without the token is still a 401: say nothing about the API to strangers.
    assert (
        httpx.post(f"{service.url}/api/studies", content=b"{", headers=headers).status_code == 401
    )
    assert db_counts(service.db_url) == before
    # Reads need the token too (the service was not started with --public-reads).
    assert httpx.get(f"{service.url}/api/studies", headers=headers).status_code == 401


HUGE_MODEL = {
    "preset": "tiny",
    "n_layer": 1024,
    "d_model": 65536,
    "n_head": 64,
    "vocab_size": 4_000_000,
    "seq_len": 1_048_576,
}
BIG = b'{"model": {"preset": "tiny"}, "name": "' + b"x" * (2 * 1024 * 1024) + b'"}'
DEEP = b'{"model": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 422, "malformed JSON"),
        (b"[1, 2]", 422, "dictionary"),
        (BIG, 413, "over 1024 KiB"),
        (DEEP, 400, ""),
        (json.dumps({"model": "tiny"}).encode(), 422, "needs a budget"),
        (json.dumps(study_body(gpus=2)).encode(), 422, "gpus: unknown field"),
        (json.dumps(study_body(space="../../etc/passwd")).encode(), 422, "is not a name"),
        (json.dumps(study_body(space="no-such-space")).encode(), 422, "not a built-in space"),
        (json.dumps(study_body(model="gpt9")).encode(), 422, "unknown preset 'gpt9'"),
        (
            json.dumps(study_body(model={"preset": "tiny", "n_head": 3})).encode(),
            422,
            "n_head=3 must divide",
        ),
        (
            json.dumps(
                study_body(space={**REPLAY_SPACE, "knobs": {"precision": ["fp12"]}})
            ).encode(),
            422,
            "'fp12' is not a valid precision",
        ),
        (json.dumps(study_body(max_trials=0)).encode(), 422, "max_trials"),
        (json.dumps(study_body(name="n" * 500)).encode(), 422, "name"),
        (json.dumps(study_body(objective="mtokens_per_usd")).encode(), 422, "usd_per_gpu_hour"),
        (json.dumps(study_body(sampler="bayes")).encode(), 422, "sampler"),
        (json.dumps(study_body(objective="time_to_train")).encode(), 422, "planned_tokens"),
        (
            json.dumps(study_body(options={"max_mem_gib": -1})).encode(),
            422,
            "max_mem_gib",
        ),
        (json.dumps(study_body(model=HUGE_MODEL)).encode(), 422, "over the limit of 2e+12"),
        (json.dumps(study_body(gpus_per_trial=1024)).encode(), 422, "over the limit of 512"),
        (json.dumps(study_body(name="x\x1b]0;pwned\x07")).encode(), 422, "U+001B"),
    ],
    ids=[
        "malformed",
        "not-object",
        "oversized",
        "deep",
        "no-budget",
        "unknown-field",
        "space-path",
        "space-unknown",
        "preset-unknown",
        "bad-shape",
        "bad-knob",
        "zero-trials",
        "long-name",
        "cost-no-price",
        "bad-sampler",
        "time-no-length",
        "negative-ceiling",
        "absurd-model",
        "absurd-gpus",
        "control-name",
    ],
)
def test_bad_bodies_get_4xx_with_a_remedy_and_write_nothing(
    service: Service, body: bytes, status: int, needle: str
) -> None:
    before = quiet_counts(service)
    response = service.client.post(
        "/api/studies", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and needle in detail
    assert db_counts(service.db_url) == before


def test_oversized_chunked_body_is_refused(service: Service) -> None:
    before = quiet_counts(service)

    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b"x" * 65536

    response = service.client.post(
        "/api/studies", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert db_counts(service.db_url) == before


def test_unknown_study_and_trial_are_404_with_a_hint(service: Service) -> None:
    response = service.client.get("/api/studies/st-doesnotexist/best")
    assert response.status_code == 404 and "autotuner status" in response.json()["detail"]
    study = service.client.post("/api/studies", json=study_body(max_trials=2)).json()
    response = service.client.get(f"/api/studies/{study['id']}/trials/999")
    assert response.status_code == 404 and "no trial #999" in response.json()["detail"]


def test_20_concurrent_submits_and_200_concurrent_reads(service: Service) -> None:
    client = service.client

    def submit(i: int) -> httpx.Response:
        with service.client as c:
            return c.post("/api/studies", json=study_body(name=f"burst-{i}", max_trials=3, seed=i))

    with ThreadPoolExecutor(20) as pool:
        submitted = list(pool.map(submit, range(20)))
    assert [r.status_code for r in submitted] == [201] * 20
    ids = {r.json()["id"] for r in submitted}
    assert len(ids) == 20

    paths = ["/api/studies", "/healthz"] + [
        f"/api/studies/{i}{suffix}" for i in ids for suffix in ("", "/trials", "/best")
    ]
    shared = httpx.Client(
        base_url=service.url,
        headers={"Authorization": f"Bearer {service.token}"},  # reads need the token too
        timeout=60,
        limits=httpx.Limits(max_connections=200),
    )

    def read(i: int) -> int:
        return shared.get(paths[i % len(paths)]).status_code

    with ThreadPoolExecutor(200) as pool:
        codes = list(pool.map(read, range(200)))
    shared.close()
    assert codes == [200] * 200

    def all_done() -> bool:
        views = client.get("/api/studies", params={"limit": 1000}).json()
        return all(v["status"] == "completed" for v in views if v["id"] in ids)

    wait_for(all_done, 120, "the 20 studies to finish")
    for study_id in ids:
        trials = client.get(f"/api/studies/{study_id}/trials").json()
        assert [t["number"] for t in trials] == list(range(len(trials)))
        assert sum(t["state"] != "pruned" for t in trials) == 3


def test_no_secret_in_responses_or_logs(
    pg_database: str, landscape_file: Path, start_service: Callable[..., Service]
) -> None:
    # Postgres here trusts local connections, so any password is accepted: the service
    # connects with one, and it must never be shown.
    from sqlalchemy.engine import make_url

    url = make_url(pg_database).set(password="hunter2-secret")
    svc = start_service(
        url.render_as_string(hide_password=False),
        executor=f"replay:{landscape_file}",
        port=free_port(),
    )
    study = svc.client.post("/api/studies", json=study_body(max_trials=2)).json()
    wait_for(_finished(svc.client, study["id"]), 30, "the study to finish")
    bodies = [
        svc.client.get(p).text
        for p in (
            "/healthz",
            "/api/studies",
            f"/api/studies/{study['id']}",
            "/openapi.json",
            f"/api/studies/{study['id']}/trials/0",
            f"/api/studies/{study['id']}/export",
        )
    ]
    svc.stop()
    for text in [*bodies, svc.log(10_000)]:
        assert "hunter2-secret" not in text
        assert svc.token not in text
    assert "***" in svc.log(10_000)  # the redacted URL was logged
