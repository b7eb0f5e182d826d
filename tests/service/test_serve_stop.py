"""`autotuner serve` stops cleanly: SIGTERM takes down the local Ray cluster it started (no
raylet, agent or idle worker lives on) and the pre-imported worker of its node with the trial
it forked, with one line saying so and no stack dump.

Each service here runs with a marker in its environment; every process it starts inherits the
environment, so `procs.with_env(marker)` finds them all, even after they were re-parented.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.direct_db import direct_connection
from tests.polling import wait_for
from tests.service import procs
from tests.service.conftest import CPU_SPACE, Service, study_body

pytestmark = [pytest.mark.service, pytest.mark.ray]


def _stop_and_check_nothing_remains(service: Service, marker: str) -> str:
    assert service.proc is not None
    started = procs.with_env(marker)
    assert len(started) > 3, "the service should have started a local Ray (raylet, gcs, agents)"
    service.proc.send_signal(signal.SIGTERM)
    service.proc.wait(30)
    # Within a few seconds of the service's exit: nothing it started is alive.
    deadline = time.monotonic() + 5
    while (left := procs.with_env(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    described = [" ".join(procs.cmdline(p))[:120] for p in left]
    assert not left, f"processes outlived the service: {described}"
    log = service.log(400)
    assert "Traceback" not in log
    assert "SIGTERM received" not in log  # Ray's C++ stack dump
    return log


def test_sigterm_takes_down_the_local_ray_it_started(
    start_service: Callable[..., Service], tmp_path: Path
) -> None:
    marker = f"AUTOTUNER_TEST_SERVE={uuid.uuid4().hex}"
    name, value = marker.split("=")
    service = start_service(f"sqlite:///{tmp_path / 'fresh.db'}", env={name: value})
    log = _stop_and_check_nothing_remains(service, marker)
    stopped = [line for line in log.splitlines() if "autotuner.service: stopped" in line]
    assert len(stopped) == 1, log


@pytest.mark.trials
def test_sigterm_during_a_trial_leaves_no_trial_or_ray_process(
    start_service: Callable[..., Service], tmp_path: Path
) -> None:
    marker = f"AUTOTUNER_TEST_SERVE={uuid.uuid4().hex}"
    name, value = marker.split("=")
    service = start_service(f"sqlite:///{tmp_path / 'fresh.db'}", env={name: value})
    with service.client as client:
        # The whole space (16 configs): trials keep coming after the worker answers. With 4, a
        # loaded CI machine once ran them all fresh before it did, and no trial was forked.
        reply = client.post("/api/studies", json=study_body(space=CPU_SPACE, max_trials=16))
        assert reply.status_code == 201, reply.text
        study_id = reply.json()["id"]
    # The node's first trial runs fresh while its pre-imported worker starts; wait for a
    # trial that worker forked, so the stop meets both the server and its child.
    forked = wait_for(
        lambda: [p for p in procs.trial_processes(study_id) if procs.forked(p)],
        timeout_s=150,
        what="a trial forked by the pre-imported worker",
    )
    assert procs.preload_servers(marker), "the node's pre-imported worker should be serving"
    _stop_and_check_nothing_remains(service, marker)
    assert not procs.preload_servers(marker)
    assert not [p for p in forked if procs.alive(p)]
    # The drain stored what it stopped: the study interrupted (a later service leaves it
    # alone until `autotuner resume`), no trial `running` (issue 42: one stayed so).
    with direct_connection(f"sqlite:///{tmp_path / 'fresh.db'}") as connection:
        status = connection.execute(text("SELECT status FROM studies")).scalar_one()
        states = list(connection.execute(text("SELECT state, error_class FROM trials")))
    assert status == "interrupted"
    # The forked trial may have ended before the signal (a tiny trial takes a second or two);
    # one still in flight is stored interrupted (test_scheduler.py stops one for certain).
    assert not [row for row in states if row[0] == "running"], states
    assert all(row[1] == "interrupted" for row in states if row[0] == "lost"), states
