"""The OpenAPI schema documents every response, and real responses are the views, byte for byte.

The app runs in process (no coordinator) on the real Postgres, over a study run to the end by the
ReplayExecutor, so the stored recommendation carries the policy's evidence too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, TypeAdapter

from autotuner.api import schemas
from autotuner.api.app import ServiceSettings, create_app
from autotuner.executors.replay import ReplayExecutor
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.session import Database
from autotuner.study import operations, trial_reads
from autotuner.study.coordinator import StudyRunner, create_study
from tests.fakes import synthetic_landscape
from tests.service.conftest import KNOBS, REPLAY_SPACE, study_body

pytestmark = pytest.mark.postgres


@pytest.fixture
def api(pg_url: str) -> Iterator[tuple[TestClient, Database, str]]:
    db = Database(pg_url)
    study_id = create_study(
        db,
        model=ModelSpec.resolve({"preset": "tiny"}),
        space=parse_space(REPLAY_SPACE),
        max_trials=12,
    )
    runner = StudyRunner(
        db, study_id, ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS)), poll_s=0
    )
    runner.run()
    app = create_app(ServiceSettings(db_url=pg_url, coordinator=False, migrate=False))
    with TestClient(app) as client:
        yield client, db, study_id


def _typed(schema: dict[str, Any]) -> bool:
    if schema.get("type") == "array":
        return _typed(schema.get("items", {}))
    return "$ref" in schema or bool(schema.get("properties")) or schema.get("type") == "string"


def test_every_api_route_documents_its_response(api: tuple[TestClient, Database, str]) -> None:
    client, _, _ = api
    paths = client.get("/openapi.json").json()["paths"]
    routes = [
        (path, method, op)
        for path, ops in paths.items()
        if path.startswith("/api/") or path == "/healthz"
        for method, op in ops.items()
        if method in ("get", "post")
    ]
    assert len(routes) >= 10
    for path, method, op in routes:
        ok = [op["responses"][code] for code in op["responses"] if code.startswith("2")]
        assert ok, f"{method} {path} documents no 2xx response"
        for media, content in ok[0]["content"].items():
            assert _typed(content["schema"]), f"{method} {path} ({media}): untyped response"
    assert paths["/api/studies/{study}/best"]["get"]["responses"]["200"]["content"][
        "application/json"
    ]["schema"] == {"$ref": "#/components/schemas/BestView"}


def _same_json(body: bytes, view: Any) -> None:
    """The response is the view's JSON exactly: same keys, same order, nulls kept."""
    assert body == json.dumps(view, ensure_ascii=False, separators=(",", ":")).encode()


def test_responses_are_the_views_and_validate(api: tuple[TestClient, Database, str]) -> None:
    client, db, study_id = api
    queued = client.post("/api/studies", json=study_body(name="queued"))
    assert queued.status_code == 201
    schemas.StudyView.model_validate(queued.json())
    _same_json(queued.content, operations.get_study(db, queued.json()["id"]))

    reads: list[tuple[str, Any, Any]] = [
        ("/api/studies", TypeAdapter(list[schemas.StudyView]), operations.list_studies(db)),
        (f"/api/studies/{study_id}", schemas.StudyView, operations.get_study(db, study_id)),
        (
            f"/api/studies/{study_id}/trials",
            TypeAdapter(list[schemas.TrialView]),
            trial_reads.list_trials(db, study_id),
        ),
        (
            f"/api/studies/{study_id}/trials/0",
            schemas.TrialDetail,
            trial_reads.get_trial(db, study_id, 0),
        ),
        ("/api/studies/queued/best", schemas.BestView, operations.get_best(db, "queued")),
        ("/api/spaces", TypeAdapter(list[schemas.SpaceInfo]), None),
        ("/healthz", schemas.Health, None),
    ]
    for url, model, view in reads:
        response = client.get(url)
        assert response.status_code == 200, f"{url}: {response.text}"
        if isinstance(model, type) and issubclass(model, BaseModel):
            model.model_validate(response.json())
        else:
            model.validate_python(response.json())
        if view is not None:
            _same_json(response.content, view)

    # A finished study's recommendation is stored as JSONB, which keeps no key order: same
    # content, with the policy's evidence (kept as extra keys of the model) included.
    best = client.get(f"/api/studies/{study_id}/best").json()
    assert best == operations.get_best(db, study_id)
    rec = schemas.BestView.model_validate(best).best
    assert rec is not None and rec.importance and rec.stopped and rec.cost_model
    assert "time_to_train_h" not in best["best"]  # left out when the objective has none

    cancelled = client.post("/api/studies/queued/cancel")
    assert cancelled.status_code == 200
    _same_json(cancelled.content, operations.get_study(db, "queued"))


class _DatabaseDown:
    def check(self) -> None:
        raise OSError("connection refused")


def test_health_is_503_and_degraded_when_the_database_is_down(
    api: tuple[TestClient, Database, str],
) -> None:
    client, db, _ = api
    client.app.state.db = _DatabaseDown()  # type: ignore[attr-defined]
    try:
        response = client.get("/healthz")
    finally:
        client.app.state.db = db  # type: ignore[attr-defined]
    assert response.status_code == 503
    health = schemas.Health.model_validate(response.json())
    assert health.status == "degraded" and response.json()["coordinator"] == {"state": "off"}
