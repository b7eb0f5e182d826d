"""One live service per coordinator id (issue 38: two services with one `--coordinator-id`
both adopted a study and marked each other's trials lost).

Two real `autotuner serve` processes on one database: the second, under the first's id,
refuses to start with the remedy while the first finishes its study with no trial lost. Then
the claim's rules on the real Postgres: another host's live claim refuses, a dead or expired
one is taken over, a stopped service gives its id back."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from autotuner.storage.session import Database
from autotuner.study.coordinator_claim import CoordinatorClaim, CoordinatorClash
from tests.polling import wait_for
from tests.service.conftest import Service, study_body

pytestmark = pytest.mark.postgres

REMEDY = "Give this one its own id with --coordinator-id ID"


def test_a_second_service_under_a_running_ones_id_refuses_to_start(
    pg_url: str, landscape_file: Path, start_service: Callable[..., Service], tmp_path: Path
) -> None:
    executor = f"replay:{landscape_file}?slots=2&delay_s=0.3"
    args = ["--coordinator-id", "shared-id"]
    first = start_service(pg_url, executor=executor, args=args)
    study = first.client.post("/api/studies", json=study_body(max_trials=12)).json()

    def trials() -> list[dict]:
        return first.client.get(f"/api/studies/{study['id']}/trials").json()

    wait_for(lambda: any(t["state"] == "running" for t in trials()), 30, "a running trial")
    second = Service(pg_url, tmp_path / "second.log", executor=executor, args=args)
    with pytest.raises(RuntimeError, match="the service exited") as refused:
        second.start(timeout_s=60)
    assert second.proc is not None and second.proc.returncode == 2
    message = str(refused.value)
    assert "coordinator id 'shared-id' is in use by another running service" in message
    assert REMEDY in message and f"pid {first.proc.pid}" in message  # type: ignore[union-attr]
    assert "Traceback" not in second.log_path.read_text()  # one line, not a failed start-up

    def finished() -> bool:
        status = first.client.get(f"/api/studies/{study['id']}").json()["status"]
        return status == "completed"

    wait_for(finished, 60, "the first service to finish its study")
    assert [t for t in trials() if t["state"] == "lost"] == []


def test_claims_refuse_a_live_one_and_take_over_a_dead_expired_or_released_one(
    pg_url: str,
) -> None:
    db = Database(pg_url)
    elsewhere = CoordinatorClaim(
        db, "serve@box:8000", 30.0, host="other-host", node="other-node", pid=4242
    )
    elsewhere.take()
    here = CoordinatorClaim(db, "serve@box:8000", 30.0)
    with pytest.raises(CoordinatorClash, match="host other-host, pid 4242"):
        here.take()  # the same host:port name on another machine: live there
    elsewhere.release()
    here.take()  # given back: free at once
    here.take()  # its own claim: a renewal
    assert here.renew()
    # Two containers with one host name (so one default id) and, as often, one pid: still
    # two processes, told apart by their node.
    twin = CoordinatorClaim(db, "serve@box:8000", 30.0, node="other-node")
    with pytest.raises(CoordinatorClash, match=f"pid {os.getpid()}"):
        twin.take()

    # A claim from this host whose process is gone (a service killed -9) is stale at once.
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = CoordinatorClaim(db, "serve@here:1", 30.0, pid=gone.pid)
    dead.take()
    CoordinatorClaim(db, "serve@here:1", 30.0).take()
    assert not dead.renew()  # taken over: the old instance cannot renew it

    # Another host's claim that was not renewed expires after its TTL.
    lapsed = CoordinatorClaim(db, "serve@there:2", 0.2, node="other-node", pid=os.getpid())
    lapsed.take()
    wait_for(lambda: _takes(CoordinatorClaim(db, "serve@there:2", 30.0)), 10, "the claim to expire")


def _takes(claim: CoordinatorClaim) -> bool:
    try:
        claim.take()
    except CoordinatorClash:
        return False
    return True
