"""End to end through `autotuner serve` and the local Ray it starts: a study of an allowed
factory (`--factory-dir`) runs, and the factory, recording its own process's environment,
finds neither the service's token nor its database URL, and the operator's directories that
`serve` exported to its workers (which they check a factory's pin against)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.polling import wait_for
from tests.service.conftest import CPU_SPACE, TOKEN, Service, study_body
from tests.workers.test_trial_secrets import recording_factory

pytestmark = [pytest.mark.service, pytest.mark.ray, pytest.mark.trials]

SIZES = {"n_layer": 1, "d_model": 32, "n_head": 2, "vocab_size": 256, "seq_len": 16}


def test_a_served_factory_trial_gets_no_service_secret(
    start_service: Callable[..., Service], tmp_path: Path
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    factory, out = recording_factory(models)
    module = Path(factory.rpartition(":")[0]).stem
    db_url = f"sqlite:///{tmp_path / 'served.db'}"
    service = start_service(db_url, args=["--factory-dir", str(models)])
    model = {"factory": f"{module}:build", "factory_args": {"mlp_ratio": 2}, **SIZES}
    reply = service.client.post(
        "/api/studies", json=study_body(model=model, space=CPU_SPACE, max_trials=1)
    )
    assert reply.status_code == 201, reply.text
    study_id = reply.json()["id"]

    def ended() -> str | None:
        status = service.client.get(f"/api/studies/{study_id}").json()["status"]
        return status if status in ("completed", "failed") else None

    assert wait_for(ended, 240, "the study to end") == "completed", service.log()
    trials = service.client.get(f"/api/studies/{study_id}/trials").json()
    assert trials[0]["state"] == "complete", trials[0]
    environ = json.loads(out.read_text())
    assert "AUTOTUNER_TOKEN" not in environ and TOKEN not in environ.values()
    assert "AUTOTUNER_DATABASE_URL" not in environ
    assert environ["AUTOTUNER_FACTORY_DIRS"] == str(models)
    assert not [k for k in environ if k == "RAY_AUTH_TOKEN"]
