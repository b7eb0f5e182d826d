"""A one-GPU study on a node with several GPUs runs one trial per GPU at once (Ray's test
cluster of 3 logical GPUs on this machine, real Postgres, the real RayExecutor with fake trial
bodies: tests/fakes.py `fake_ray_executor`, each logging the GPU ids its task was given).

- up to 3 trials run at once, each pinned to its own GPU (Ray's GPU id and
  CUDA_VISIBLE_DEVICES agree), and no two trials overlap in time on one GPU;
- a trial that fails (its Ray task raises, or its process dies: a `crash` result) gives its
  GPU back: the next trial runs on it while the others still run;
- a coordinator killed (kill -9) with 3 trials in flight: a new one on the same database
  loses none of what finished, runs each trial that was in flight again exactly once (its
  retry unspent), and measures no config twice.

One Ray cluster for the module: starting one costs seconds of the 2-core CI machine.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotuner.options import StudyOptions
from autotuner.purpose import SEARCH_TRIALS
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec, canonical_params
from autotuner.storage.models import StudyStatus, Trial, TrialState
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import StudyRunner, create_study
from tests.fakes import FAKE_TRIAL_S_ENV, fake_ray_executor, fake_trial_fault, fake_trial_log
from tests.faults.invariants import check_invariants
from tests.polling import wait_for

pytestmark = [pytest.mark.ray, pytest.mark.postgres, pytest.mark.slow]

GPUS = 3
TRIAL_S = 2.0  # each fake trial's length: long enough for three to overlap
SPACE = parse_space(
    {
        "name": "concurrent-gpus",
        "knobs": {"micro_batch_size": [1, 2, 4, 8, 16, 32, 64, 128]},
        "fixed": {"precision": "fp32", "attention": "math", "compile_mode": "none"},
    }
)
MODEL = ModelSpec.resolve({"preset": "tiny"})
# The search alone: the end's re-measurements and headroom check add batches, not coverage.
SEARCH_ONLY = StudyOptions(remeasure_top=0, headroom=0)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A Ray head with 3 logical GPUs (and a CPU per trial), for the whole module."""
    import ray
    from ray.cluster_utils import Cluster

    ray.shutdown()  # a Ray left connected by an earlier test would be used instead
    before = os.environ.get(FAKE_TRIAL_S_ENV)
    os.environ[FAKE_TRIAL_S_ENV] = str(TRIAL_S)  # the node inherits it at its start
    head = Cluster(initialize_head=True, head_node_args={"num_cpus": GPUS + 1, "num_gpus": GPUS})
    try:
        yield head
    finally:
        ray.shutdown()
        head.shutdown()
        if before is None:
            os.environ.pop(FAKE_TRIAL_S_ENV, None)
        else:
            os.environ[FAKE_TRIAL_S_ENV] = before


@pytest.fixture(scope="module")
def executor(cluster: Any) -> Iterator[Any]:
    ex = fake_ray_executor(cluster.address)
    wait_for(lambda: ex.target().gpus_total == GPUS, 30, "the cluster's 3 GPUs")
    try:
        yield ex
    finally:
        ex.close()


def _trials(db: Database, study_id: str) -> list[Trial]:
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
        s.expunge_all()
        return trials


def _log(study_id: str) -> list[dict[str, Any]]:
    path = fake_trial_log(study_id)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _one_gpu_each_and_no_overlap(log: list[dict[str, Any]]) -> None:
    """Each trial had exactly one GPU, as CUDA_VISIBLE_DEVICES too; two trials on one GPU never
    overlapped in time."""
    for entry in log:
        assert len(entry["gpus"]) == 1, entry
        assert entry["cuda_visible_devices"] == entry["gpus"][0], entry
    by_gpu: dict[str, list[dict[str, Any]]] = {}
    for entry in log:
        by_gpu.setdefault(entry["gpus"][0], []).append(entry)
    for gpu, entries in by_gpu.items():
        entries.sort(key=lambda e: e["start"])
        for a, b in itertools.pairwise(entries):
            assert b["start"] >= a["end"], f"trials #{a['number']} and #{b['number']} on GPU {gpu}"


def _max_overlap(log: list[dict[str, Any]]) -> int:
    events = sorted([(e["start"], 1) for e in log] + [(e["end"], -1) for e in log])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def _study(db: Database, max_trials: int) -> str:
    study_id = create_study(
        db,
        model=MODEL,
        space=SPACE,
        max_trials=max_trials,
        device_type="cuda",
        options=SEARCH_ONLY,
    )
    fake_trial_log(study_id).unlink(missing_ok=True)
    return study_id


def test_three_gpus_run_three_trials_at_once_each_on_its_own_gpu(
    executor: Any, pg_url: str
) -> None:
    db = Database(pg_url)
    study_id = _study(db, max_trials=6)
    runner = StudyRunner(db, study_id, executor, poll_s=0.1)
    runner.start()
    deadline = time.monotonic() + 120
    most_in_flight = 0
    while not runner.done and time.monotonic() < deadline:
        runner.step()
        most_in_flight = max(most_in_flight, len(runner.in_flight))
    assert runner.done, "the study did not finish"
    assert most_in_flight == GPUS  # never more trials in flight than GPUs, and all used
    log = _log(study_id)
    measured = [t for t in _trials(db, study_id) if t.state == TrialState.COMPLETE]
    assert len(log) == len(measured) >= 6, (log, [t.number for t in measured])
    _one_gpu_each_and_no_overlap(log)
    assert _max_overlap(log) == GPUS, log  # three at once, not one after another
    assert len({e["gpus"][0] for e in log}) == GPUS
    check_invariants(db, study_id, max_trials=6)


@pytest.mark.parametrize("fault", ["raise", "crash"])
def test_a_failed_trial_gives_its_gpu_to_the_next(executor: Any, pg_url: str, fault: str) -> None:
    db = Database(pg_url)
    study_id = _study(db, max_trials=5)
    fake_trial_fault(study_id, 1).write_text(fault)  # #1 fails at once, beside #0 and #2
    runner = StudyRunner(db, study_id, executor, poll_s=0.1)
    runner.start()
    runner.step()  # the first round fills the three GPUs
    assert sorted(f.number for f in runner.in_flight.values()) == [0, 1, 2]
    deadline = time.monotonic() + 120
    while not runner.done and time.monotonic() < deadline:
        runner.step()
    assert runner.done, "the study did not finish"
    log = {e["number"]: e for e in _log(study_id)}
    failed = log[1]
    assert failed["outcome"] == fault
    # #1's GPU served another trial while #0 and #2 still ran (Ray assigns a GPU when a task
    # gets its worker, not in submission order, so which trial took it may vary), and three
    # trials besides #1 ran at once: the failure kept no GPU.
    others_end = min(log[0]["end"], log[2]["end"])
    reused = [
        e
        for n, e in log.items()
        if n != 1 and e["gpus"] == failed["gpus"] and failed["end"] <= e["start"] < others_end
    ]
    assert reused, (failed, sorted(log.values(), key=lambda e: e["start"]))
    assert _max_overlap([e for n, e in log.items() if n != 1]) == GPUS
    _one_gpu_each_and_no_overlap(list(log.values()))
    trials = _trials(db, study_id)
    assert trials[1].state == TrialState.FAILED and trials[1].retried
    retry = next(t for t in trials if t.retry_of == 1)
    assert retry.state == TrialState.COMPLETE
    check_invariants(db, study_id, max_trials=5)


# The coordinator, in a process of its own (its own Ray driver), as `tune` runs it.
_COORDINATOR = """
import sys
from autotuner.storage.session import Database
from autotuner.study.coordinator import StudyRunner
from tests.fakes import fake_ray_executor

url, study_id, address = sys.argv[1:]
StudyRunner(Database(url), study_id, fake_ray_executor(address), owner="conc", poll_s=0.1).run()
"""


def test_a_coordinator_killed_mid_batch_loses_nothing_and_runs_nothing_twice(
    cluster: Any, executor: Any, pg_url: str
) -> None:
    db = Database(pg_url)
    study_id = _study(db, max_trials=7)
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": ""}
    first = subprocess.Popen(
        [sys.executable, "-c", _COORDINATOR, pg_url, study_id, cluster.address],
        cwd=REPO,
        env=env,
        start_new_session=True,
    )
    try:

        def mid_batch() -> list[Trial] | None:
            trials = _trials(db, study_id)
            running = [t for t in trials if t.state == TrialState.RUNNING]
            done = [t for t in trials if t.state == TrialState.COMPLETE]
            return trials if len(running) == GPUS and done else None

        wait_for(mid_batch, 120, "3 trials in flight after one measured", every_s=0.05)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(30)
    before = _trials(db, study_id)  # read after the kill: a launch may have come in between
    completed = {t.number: t for t in before if t.state == TrialState.COMPLETE}
    in_flight = sorted(t.number for t in before if t.state == TrialState.RUNNING)
    assert len(in_flight) >= GPUS - 1, in_flight  # one may have just finished at the kill

    runner = StudyRunner(db, study_id, executor, owner="conc", poll_s=0.1)
    runner.start()  # at once: the same coordinator id takes its own lease back
    deadline = time.monotonic() + 120
    while not runner.done and time.monotonic() < deadline:
        runner.step()
    assert runner.done, "the restarted coordinator did not finish the study"
    after = _trials(db, study_id)
    by_number = {t.number: t for t in after}
    with db.read() as s:
        assert StudyRepo(s).require(study_id).status == StudyStatus.COMPLETED
    for number, t in completed.items():  # nothing measured is lost or rewritten
        kept = by_number[number]
        assert (kept.state, kept.objective_value) == (TrialState.COMPLETE, t.objective_value)
    # Each trial in flight at the kill is lost and run again exactly once, its retry unspent.
    assert sorted(t.number for t in after if t.state == TrialState.LOST) == in_flight
    reruns = [t for t in after if t.retry_of is not None]
    assert sorted(t.retry_of for t in reruns) == in_flight
    assert all(t.attempt == 1 and t.state == TrialState.COMPLETE for t in reruns)
    # No config measured twice: the re-runs take the lost trials' places, nothing else repeats.
    measured = [
        canonical_params(t.params)
        for t in after
        if t.state == TrialState.COMPLETE and t.purpose in SEARCH_TRIALS
    ]
    assert len(measured) == len(set(measured)), [(t.number, t.purpose, t.params) for t in after]
    # The restarted coordinator's trials kept to the GPUs: never two on one at once (what
    # the killed driver's tasks logged included: Ray ends them with their driver).
    _one_gpu_each_and_no_overlap(_log(study_id))
    check_invariants(db, study_id, max_trials=7)
