"""Crash safety on real parts: the service process, Postgres, a Ray head with 2 logical GPUs,
and real trial subprocesses (a tiny model on the CPU).

What is killed, and what must hold afterwards:
- the service (kill -9) mid-study: restarted, it finishes the study; no completed trial is lost
  or changed, every trial number is unique, each trial that was running is retried once;
- a trial that hangs: killed at its wall-clock limit, recorded as timeout, retried once;
- a trial's process, or the Ray worker running it, killed mid-trial: recorded as failed
  (crash / infra) and retried once;
- Postgres restarted under a running service: the service reconnects and the study finishes.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.pgserver import PrivatePostgres
from tests.polling import wait_for
from tests.service import procs
from tests.service.conftest import CPU_SPACE, Service, running_trial_numbers, study_body

pytestmark = [pytest.mark.postgres]  # the restart test brings its own (private_postgres)


def _trials(client: httpx.Client, study_id: str) -> list[dict[str, Any]]:
    return client.get(f"/api/studies/{study_id}/trials").json()


def _status(client: httpx.Client, study_id: str) -> str:
    return client.get(f"/api/studies/{study_id}").json()["status"]


def _max_overlap(trials: list[dict[str, Any]]) -> int:
    """The most trials that ran at the same moment (from their start and finish times)."""
    events = []
    for t in trials:
        if t["started_at"] and t["finished_at"]:
            events += [(t["started_at"], 1), (t["finished_at"], -1)]
    running = peak = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        running += step
        peak = max(peak, running)
    return peak


def _cpu_study(**overrides: Any) -> dict[str, Any]:
    return study_body(**{"space": CPU_SPACE, **overrides})


def _space_with_timeout(timeout_s: float) -> dict[str, Any]:
    return {**CPU_SPACE, "measure": {**CPU_SPACE["measure"], "timeout_s": timeout_s}}


@pytest.mark.ray
@pytest.mark.slow
def test_service_killed_mid_study_resumes_and_loses_nothing(
    pg_url: str, ray_address: str, start_service: Callable[..., Service]
) -> None:
    svc = start_service(pg_url, ray_address=ray_address)
    client = svc.client
    study = client.post("/api/studies", json=_cpu_study(name="kill9", max_trials=8)).json()
    sid = study["id"]

    def mid_study() -> Any:
        trials = _trials(client, sid)
        done = [t for t in trials if t["state"] == "complete"]
        running = [t for t in trials if t["state"] == "running"]
        return trials if len(done) >= 2 and running else None

    before = wait_for(mid_study, 120, "2 completed trials and 1 running", every_s=0.1)
    completed_before = {t["number"]: t for t in before if t["state"] == "complete"}
    svc.kill9()
    # Read after the kill, from the database: a trial can start between the API snapshot
    # above and the kill (the Ray workers are reused, so a launch takes milliseconds).
    running_at_kill = running_trial_numbers(pg_url, sid)
    assert running_at_kill, "the study had a running trial when the service was killed"
    orphans = procs.trial_processes(sid)  # trial processes the dead service left behind

    svc.restart()
    wait_for(lambda: _status(client, sid) == "completed", 180, "the study to finish")
    after = _trials(client, sid)
    by_number = {t["number"]: t for t in after}
    report = {
        "running_at_kill": running_at_kill,
        "completed_before_kill": sorted(completed_before),
        "orphaned_trial_processes": len(orphans),
        "states_after": {t["number"]: t["state"] for t in after},
    }
    print("kill -9 scenario:", json.dumps(report))

    # Every number once, in order; nothing left running.
    assert [t["number"] for t in after] == list(range(len(after)))
    assert not [t for t in after if t["state"] == "running"]
    # No completed trial lost or rewritten.
    for number, t in completed_before.items():
        assert by_number[number]["state"] == "complete"
        assert by_number[number]["tokens_per_s"] == t["tokens_per_s"]
        assert by_number[number]["finished_at"] == t["finished_at"]
    # The trials that were running when it died are lost, and each is run again exactly once,
    # at its own attempt: the service's death spends no config's retry (study/lost.py).
    lost = [t for t in after if t["state"] == "lost"]
    assert sorted(t["number"] for t in lost) == running_at_kill
    retries = [t for t in after if t["retry_of"] is not None]
    assert sorted(t["retry_of"] for t in retries) == running_at_kill
    assert all(t["attempt"] == 1 for t in retries)
    # The budget counts first attempts only; concurrency stayed within the 2 GPUs.
    assert sum(1 for t in after if t["state"] != "pruned" and t["retry_of"] is None) == 8
    assert _max_overlap([t for t in after if t["state"] != "lost"]) <= 2
    assert client.get(f"/api/studies/{sid}/best").json()["best"] is not None


@pytest.mark.ray
@pytest.mark.slow
def test_hanging_trial_is_killed_at_its_limit_and_retried_once(
    pg_url: str, ray_address: str, start_service: Callable[..., Service]
) -> None:
    # A normal trial takes ~5 s on an idle machine but 15-20 s on a loaded one (torch's import
    # alone): the limit leaves room for the retry, which runs under the same limit.
    limit_s = 30.0
    svc = start_service(
        pg_url, ray_address=ray_address, env={"AUTOTUNER_TEST_FAULTS": json.dumps({"0": "hang"})}
    )
    client = svc.client
    body = _cpu_study(max_trials=1, space=_space_with_timeout(limit_s))
    sid = client.post("/api/studies", json=body).json()["id"]
    hung = wait_for(lambda: procs.trial_process(sid, 0), 60, "trial 0's process")
    wait_for(lambda: _status(client, sid) == "completed", 180, "the study to finish")

    trials = _trials(client, sid)
    first = client.get(f"/api/studies/{sid}/trials/0").json()
    print(
        "hang scenario:",
        json.dumps(
            {
                "trial0_wall_s": first["result"]["wall_s"],
                "states": [t["state"] for t in trials],
                "errors": [t.get("error_message") for t in trials],
            }
        ),
    )
    assert first["state"] == "failed" and first["error_class"] == "timeout"
    assert f"after {limit_s:.0f} s" in first["error_message"]
    assert limit_s <= first["result"]["wall_s"] < limit_s + 10
    assert not procs.alive(hung), "the hung trial's process must be killed"
    retry = [t for t in trials if t["retry_of"] == 0]
    assert len(retry) == 1 and retry[0]["attempt"] == 2
    assert retry[0]["state"] == "complete", retry[0]
    assert [t["number"] for t in trials] == list(range(len(trials)))


@pytest.mark.ray
def test_a_killed_trial_process_is_retried_once_and_a_killed_ray_worker_run_again(
    pg_url: str, ray_address: str, start_service: Callable[..., Service]
) -> None:
    # Trials 0 and 1 hang (the two GPUs), so each is still running when we kill it.
    svc = start_service(
        pg_url,
        ray_address=ray_address,
        env={"AUTOTUNER_TEST_FAULTS": json.dumps({"0": "hang", "1": "hang"})},
    )
    client = svc.client
    body = _cpu_study(max_trials=3, space=_space_with_timeout(120))
    sid = client.post("/api/studies", json=body).json()["id"]

    trial0 = wait_for(lambda: procs.trial_process(sid, 0), 60, "trial 0's process")
    worker1 = wait_for(lambda: procs.ray_task_worker(sid, 1), 60, "trial 1's Ray worker")
    trial1 = wait_for(lambda: procs.trial_process(sid, 1), 60, "trial 1's process")
    os.kill(trial0, signal.SIGKILL)  # the trial's own process dies (like a segfault or OOM kill)
    os.kill(worker1, signal.SIGKILL)  # the Ray worker process running trial 1 dies
    wait_for(lambda: _status(client, sid) == "completed", 120, "the study to finish")

    trials = {t["number"]: t for t in _trials(client, sid)}
    print(
        "worker-kill scenario:",
        json.dumps({n: [t["state"], t["error_class"]] for n, t in trials.items()}),
    )
    assert trials[0]["state"] == "failed" and trials[0]["error_class"] == "crash"
    assert "SIGKILL" in trials[0]["error_message"]
    # The Ray worker's death is the cluster's (WorkerCrashedError), not the config's: lost, and
    # run again without spending its retry (study/lost.py).
    assert trials[1]["state"] == "lost" and trials[1]["error_class"] == "infra"
    assert "Ray task failed" in trials[1]["error_message"]
    for number, attempt in ((0, 2), (1, 1)):
        retries = [t for t in trials.values() if t["retry_of"] == number]
        assert len(retries) == 1 and retries[0]["state"] == "complete"
        assert retries[0]["attempt"] == attempt
    assert list(trials) == list(range(len(trials)))
    # The trial process of the killed Ray worker dies with it (parent-death signal): no orphan
    # keeps a device busy while its retry runs.
    wait_for(lambda: not procs.alive(trial1), 30, "trial 1's process to die with its worker")


# --------------------------------------------------------------------------- Postgres restart


@pytest.mark.slow
def test_postgres_restart_under_a_running_service(
    private_postgres: PrivatePostgres,
    landscape_file: Path,
    start_service: Callable[..., Service],
) -> None:
    # A server of the test's own: restarting the machine's shared one would break every other
    # test and user of it meanwhile.
    svc = start_service(
        private_postgres.url, executor=f"replay:{landscape_file}?slots=2&delay_s=0.4"
    )
    client = svc.client
    sid = client.post("/api/studies", json=study_body(max_trials=24)).json()["id"]
    wait_for(
        lambda: len([t for t in _trials(client, sid) if t["state"] == "complete"]) >= 4,
        60,
        "4 completed trials",
    )
    # Restart it in the background and keep calling the API meanwhile: every call answers
    # 200, or 503 with Retry-After while the database is down; never a 500, never a hang.
    assert _status(client, sid) == "running"
    restarter = threading.Thread(target=private_postgres.restart, kwargs={"down_s": 3.0})
    restarter.start()
    codes: list[int] = []
    while restarter.is_alive() or len(codes) < 10:
        try:
            codes.append(client.get(f"/api/studies/{sid}", timeout=15).status_code)
        except httpx.HTTPError:
            codes.append(0)
        time.sleep(0.1)
    restarter.join()
    back_at = dt.datetime.now(dt.UTC)
    assert set(codes) <= {200, 503}, codes
    assert 503 in codes, "the API never saw the outage: was Postgres really down?"
    wait_for(lambda: _status(client, sid) == "completed", 120, "the study to finish")

    trials = _trials(client, sid)
    finished_after = [t for t in trials if dt.datetime.fromisoformat(t["finished_at"]) > back_at]
    print(
        "postgres-restart scenario:",
        json.dumps(
            {
                "trials": len(trials),
                "states": sorted({t["state"] for t in trials}),
                "api_codes": {str(c): codes.count(c) for c in sorted(set(codes))},
                "finished_after_outage": len(finished_after),
            }
        ),
    )
    assert [t["number"] for t in trials] == list(range(len(trials)))
    assert not [t for t in trials if t["state"] in ("running", "lost", "failed")]
    launched = sum(1 for t in trials if t["state"] != "pruned")
    assert 4 < launched <= 24  # the search may stop early; never beyond the budget
    assert finished_after, "the study must have gone on after the outage"
    log = svc.log(10_000)
    assert "database unavailable" in log and "database back after" in log
    health = client.get("/healthz").json()
    assert health["database"] == "ok" and health["coordinator"]["state"] == "running"
