"""The studies list's filters, on the server (SQLite and Postgres: the text and family filters
read the model spec's JSON, each dialect its own way): status, text in the name or model, model
family and device kind, alone and together; a bad value is a 400 that lists the allowed ones;
no match is said as such. And a study's device kind is known before its first result: stored at
submit from the cluster's target, or when a coordinator starts it, so a CPU study's page never
says "1 GPU per trial"."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from autotuner.api.app import ServiceSettings, create_app
from autotuner.executors.base import Target
from autotuner.executors.replay import ReplayExecutor
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.models import StudyStatus
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.study import operations
from autotuner.study.coordinator import StudyRunner, create_study
from autotuner.study.data_access import DataAccess
from autotuner.study.request import StudyRequest
from tests.dashboard.conftest import KNOBS, make_app
from tests.fakes import synthetic_landscape

SPACE = {"name": "filters", "knobs": KNOBS}
LLAMA = {
    "family": "llama",
    "n_layer": 4,
    "d_model": 256,
    "n_head": 4,
    "vocab_size": 1000,
    "seq_len": 64,
}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest) -> Database:
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return Database(str(request.getfixturevalue(name)))


def _study(db: Database, name: str, model: dict[str, Any], device: str | None, status: str) -> str:
    study_id = create_study(
        db,
        model=ModelSpec.resolve(model),
        space=parse_space(SPACE),
        name=name,
        max_trials=5,
        device_type=device,
    )
    with db.session() as s:
        repo = StudyRepo(s)
        repo.set_status(repo.require(study_id), StudyStatus(status))
    return study_id


@pytest.fixture
def listed(db: Database) -> tuple[TestClient, dict[str, str]]:
    ids = {
        "gpt-gpu": _study(db, "GPT-2 sweep 50%_off", {"preset": "gpt2-124m"}, "cuda", "running"),
        "tiny-cpu": _study(db, "laptop demo", {"preset": "tiny"}, "cpu", "completed"),
        "llama-gpu": _study(db, "width study", LLAMA, "cuda", "failed"),
        "llama-new": _study(db, "queued llama", {"preset": "llama-tiny"}, None, "queued"),
    }
    return TestClient(make_app(db)), ids


def _shown(client: TestClient, query: str) -> set[str]:
    resp = client.get(f"/?format=json&{query}")
    assert resp.status_code == 200, resp.text
    return {s["id"] for s in resp.json()["studies"]}


def test_each_filter_and_their_combination_selects_in_sql(
    listed: tuple[TestClient, dict[str, str]],
) -> None:
    client, ids = listed
    assert _shown(client, "") == set(ids.values())
    assert _shown(client, "status=running") == {ids["gpt-gpu"]}
    assert _shown(client, "status=queued,running") == {ids["gpt-gpu"], ids["llama-new"]}
    assert _shown(client, "status=queued&status=failed") == {ids["llama-new"], ids["llama-gpu"]}
    assert _shown(client, "device=cpu") == {ids["tiny-cpu"]}
    assert _shown(client, "device=cuda") == {ids["gpt-gpu"], ids["llama-gpu"]}
    # The family of a preset is in its stored spec too.
    assert _shown(client, "family=llama") == {ids["llama-gpu"], ids["llama-new"]}
    assert _shown(client, "family=gpt2") == {ids["gpt-gpu"], ids["tiny-cpu"]}  # tiny: gpt2
    assert _shown(client, "family=hf") == set()
    # Text: the name or the model's name, any case, a blank around it ignored.
    assert _shown(client, "q=LAPTOP") == {ids["tiny-cpu"]}
    assert _shown(client, "q=gpt2-124") == {ids["gpt-gpu"]}
    assert _shown(client, "q=+llama+") == {ids["llama-gpu"], ids["llama-new"]}  # family, name
    # % and _ are the user's characters, not SQL wildcards.
    assert _shown(client, "q=50%25_off") == {ids["gpt-gpu"]}
    assert _shown(client, "q=5%25") == set()
    assert _shown(client, "q=w_dth") == set()
    # Together: every filter must hold.
    assert _shown(client, "family=llama&device=cuda&status=failed") == {ids["llama-gpu"]}
    assert _shown(client, "family=llama&status=completed") == set()
    assert _shown(client, "q=study&device=cpu") == set()
    assert _shown(client, "q=tiny&device=cpu&family=gpt2") == {ids["tiny-cpu"]}


def test_the_page_keeps_the_filters_and_says_when_nothing_matches(
    listed: tuple[TestClient, dict[str, str]],
) -> None:
    client, ids = listed
    html = client.get("/?family=llama&device=cuda").text
    assert ids["llama-gpu"] in html and ids["gpt-gpu"] not in html
    # The filter bar shows what is on (the address is the view).
    assert "<option selected>llama</option>" in html
    assert '<option value="cuda" selected>GPU</option>' in html
    assert "1 study matching" in html
    assert 'id="no-match"' not in html
    none = client.get("/?q=no-such-study&status=running")
    assert none.status_code == 200
    assert 'id="no-match"' in none.text and "No studies match these filters" in none.text
    assert 'value="no-such-study"' in none.text  # the search stays in its box
    assert 'id="empty"' not in none.text  # not "no studies yet": there are some
    # Each row says what the study's model is and what it runs on.
    page = client.get("/").text
    assert ">CPU</td>" in page and ">1 GPU</td>" in page
    assert "llama, 4 × 256" in page  # a model without a preset: family, depth × width


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("status=paused", "choose one of queued, running, completed, cancelled, failed"),
        ("status=running,done", "status='done'"),
        ("family=gpt3", "choose one of gpt2, llama, hf, factory"),
        ("device=tpu", "choose one of cuda, cpu"),
        ("colour=red", "filter with status"),
        ("q=" + "x" * 201, "at most 200"),
    ],
)
def test_a_bad_filter_is_a_400_listing_the_allowed_values(
    listed: tuple[TestClient, dict[str, str]], query: str, named: str
) -> None:
    client, _ = listed
    as_json = client.get(f"/?format=json&{query}")
    assert as_json.status_code == 400 and named in as_json.json()["detail"]
    page = client.get(f"/?{query}")
    assert page.status_code == 400
    assert 'id="filter-error"' in page.text and 'id="study-filters"' in page.text
    assert named.replace("'", "&#39;") in page.text


def test_the_api_list_takes_the_same_filters(
    db: Database, listed: tuple[TestClient, dict[str, str]]
) -> None:
    _, ids = listed
    app = create_app(ServiceSettings(db_url=db.url, coordinator=False, migrate=False))
    with TestClient(app) as api:
        found = api.get("/api/studies", params={"family": "llama", "device": "cuda"})
        assert found.status_code == 200, found.text
        assert [s["id"] for s in found.json()] == [ids["llama-gpu"]]
        assert found.json()[0]["device_type"] == "cuda"
        both = api.get("/api/studies", params={"q": "LLAMA", "status": "queued"}).json()
        assert [s["id"] for s in both] == [ids["llama-new"]]
        assert both[0]["device_type"] is None  # no cluster has seen it yet
        assert api.get("/api/studies", params={"device": "tpu"}).status_code == 422


# --------------------------------------------------------------------------- the device kind


def _header(client: TestClient, study_id: str) -> str:
    html = client.get(f"/studies/{study_id}").text
    start = html.index('<span id="device">') + len('<span id="device">')
    return html[start : html.index("</span>", start)]


def test_a_cpu_study_says_so_before_its_first_result(sqlite_url: str) -> None:
    """Submitted to a CPU-only cluster: no trial has run, the header already says CPU."""
    db = Database(sqlite_url)
    client = TestClient(make_app(db))
    body = {"model": {"preset": "tiny"}, "space": SPACE, "max_trials": 4}
    cpu = operations.submit_study(
        db, StudyRequest.model_validate(body), Target("cpu", 0), data_access=DataAccess.nowhere()
    )
    assert cpu["device_type"] == "cpu" and cpu["trials_total"] == 0
    assert _header(client, cpu["id"]) == "trials on the CPU"
    on_gpus = StudyRequest.model_validate({**body, "gpus_per_trial": 2})
    gpu = operations.submit_study(
        db, on_gpus, Target("cuda", 8, "H200", (9, 0), 141.0), data_access=DataAccess.nowhere()
    )
    assert gpu["device_type"] == "cuda"
    assert _header(client, gpu["id"]) == "2 GPUs per trial"


def test_the_coordinator_records_the_device_it_runs_on(sqlite_url: str) -> None:
    """A study submitted without a cluster (a bare database) learns its device kind when a
    coordinator starts it: the header is right before the first trial reports."""
    db = Database(sqlite_url)
    client = TestClient(make_app(db))
    study_id = create_study(
        db, model=ModelSpec.resolve({"preset": "tiny"}), space=parse_space(SPACE), max_trials=3
    )
    assert operations.get_study(db, study_id)["device_type"] is None
    assert _header(client, study_id) == "1 GPU per trial"  # unknown yet: a GPU study's words
    cpu = Target("cpu", 0)
    executor = ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS), target=cpu)
    runner = StudyRunner(db, study_id, executor, poll_s=0)
    runner.start()  # no trial has been dispatched, let alone finished
    assert operations.get_study(db, study_id)["trials_total"] == 0
    assert operations.get_study(db, study_id)["device_type"] == "cpu"
    assert _header(client, study_id) == "trials on the CPU"
