"""Where a trial on k > 1 GPUs runs: a Ray placement group, then one task per node or per rank.

The GPUs are reserved first, as a placement group; nothing blocks while Ray places it (the
executor waits on `pg.ready()` beside the trials' tasks). Then:

- Some node can hold all k GPUs (strategy PACK, the default): the group is one bundle of k GPUs
  on one node (STRICT_PACK), and one task with num_gpus=k runs today's launcher there
  (`run_trial_process`: all k ranks on that node, which see each other's GPUs, as NCCL's
  peer-to-peer paths want). A task may use no more than one bundle holds, hence one bundle.
- No node can (or strategy SPREAD): one bundle per rank ({"GPU": 1, "CPU": 1}) under the
  strategy, and the ranks go where the bundles landed:
  one task per bundle (num_gpus=1, pinned to its bundle), each running
  one rank through `run_rank_processes(nproc_per_node=1, nnodes=k, node_rank=i)`; LOCAL_RANK 0 is
  the GPU Ray gave that task. All meet at rank 0's node (its NodeManagerAddress) on one port
  chosen here.

The trial's result across nodes: rank 0's ok result; otherwise a failure. A failing rank takes its
peers on other nodes down with it, and each of them reports its own error within a moment (a
closed connection, say), so the first failure to arrive is not necessarily the first that
happened: from the first one seen, the others get `SETTLE_S` to report, and the one whose task
ended first (the nodes' clocks) is the trial's; a rank's own failure beats "rank 0 stopped for a
failed peer". A task that died (its node lost) is `infra`, and the trial lost to the cluster
(ray_errors.py). Then every task left is cancelled
(`ray.cancel(force=True)`: the ranks die with their task's process, by the parent-death signal)
and the placement group removed, so its GPUs serve the next trial.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

from autotuner.executors.ray_errors import lost_to_cluster
from autotuner.spec import FailureClass, TrialConfig, TrialResult

BUNDLE = {"GPU": 1, "CPU": 1}
SETTLE_S = 5.0  # after a first failure, how long the other nodes' tasks get to report theirs
WORKER_CHARS = 200  # the trial record's worker column


def _run_node_task(config_json: str, rendezvous: dict[str, Any] | None) -> tuple[Any, str, float]:
    """Runs on a Ray worker: this node's ranks of the trial (all of them without a rendezvous).

    Returns (result json, or None for a node other than 0 whose ranks ended cleanly; the worker;
    when it ended, by this node's clock)."""
    import socket

    import ray

    config = TrialConfig.model_validate_json(config_json)
    result: TrialResult | None
    if rendezvous is None:
        from workers.launch import run_trial_process

        result = run_trial_process(config)
    else:
        from workers.launch_ranks import run_rank_processes

        result = run_rank_processes(config, nproc_per_node=1, **rendezvous)
    node = ray.get_runtime_context().get_node_id()[:8]
    worker = f"{socket.gethostname()}:{os.getpid()}@{node}"
    return (None if result is None else result.model_dump_json()), worker, time.time()


def pick_port(addr: str) -> int:
    """A port for rank 0's store: free now if `addr` is this host, else a random high one."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((addr, 0))
        except OSError:  # not an address of this host: rank 0's node picks nothing for us
            return random.randint(20000, 29999)
        return int(s.getsockname()[1])


@dataclass
class _Failure:
    ended_at: float
    result: TrialResult
    worker: str | None
    lost: bool = False  # the cluster failed under the rank (ray_errors.py), not the trial


@dataclass
class Gang:
    """One trial on several GPUs: its reservation, then its tasks (index = node rank)."""

    config: TrialConfig
    name: str  # the tasks' names in Ray (`ray list tasks`, the workers' process titles)
    pg: Any
    ready: Any  # pg.ready(), while the GPUs are being reserved; None once the tasks run
    since: float  # when the reservation or the tasks started (time.monotonic)
    refs: list[Any] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)  # Ray node id of each task's bundle
    workers: dict[int, str] = field(default_factory=dict)  # what each finished task reported
    done: set[int] = field(default_factory=set)
    failures: list[_Failure] = field(default_factory=list)
    first_failure_at: float | None = None
    ok: tuple[TrialResult, str | None, bool] | None = None

    @property
    def reserving(self) -> bool:
        return self.ready is not None

    def waiting_on(self) -> list[Any]:
        if self.ready is not None:
            return [self.ready]
        return [ref for i, ref in enumerate(self.refs) if i not in self.done]


class Placer:
    """Starts, advances and ends gangs; the executor owns the bookkeeping of handles."""

    def __init__(self, ray: Any, strategy: str = "PACK") -> None:
        import importlib

        self._ray = ray
        # The module, not the function of the same name that `ray.util` exports.
        self._pg = importlib.import_module("ray.util.placement_group")
        self._strategy = strategy
        self._task = ray.remote(max_calls=1, max_retries=0)(_run_node_task)

    def reserve(self, config: TrialConfig, name: str) -> Gang:
        k = config.num_gpus
        if self._strategy == "PACK" and self._largest_node_gpus() >= k:
            # One node can hold the trial: one bundle of k GPUs there, so a single task (and
            # our launcher) starts every rank with all k GPUs visible, as NCCL wants.
            bundles, strategy = [{"GPU": k, "CPU": 1}], "STRICT_PACK"
        else:
            bundles, strategy = [dict(BUNDLE) for _ in range(k)], self._strategy
        # Unnamed: a placement group's name must be unique in the cluster.
        pg = self._pg.placement_group(bundles, strategy=strategy)
        return Gang(config, name, pg, pg.ready(), time.monotonic())

    def advance(self, gang: Gang, ref: Any) -> None:
        """`ref` (one of gang.waiting_on()) is ready: launch, or take in a task's answer."""
        if gang.ready is not None and ref == gang.ready:
            try:
                self._placed(gang)
            except Exception as exc:  # e.g. rank 0's node left between placement and launch
                gang.ready = None
                message = f"could not start the trial's Ray tasks: {type(exc).__name__}: {exc}"
                failure = _Failure(time.time(), _infra(message[:2000], gang), None, lost=True)
                self._failed(gang, failure)
            return
        i = next(i for i, r in enumerate(gang.refs) if r == ref)
        gang.done.add(i)
        try:
            result_json, worker, ended_at = self._ray.get(ref)
        except Exception as exc:  # the task itself failed: its worker or node was lost
            self._failed(
                gang,
                _Failure(
                    time.time(),
                    _infra(f"the Ray task of rank {i} failed: {type(exc).__name__}: {exc}", gang),
                    None,
                    lost=lost_to_cluster(exc),
                ),
            )
            return
        gang.workers[i] = worker
        if result_json is None:
            return  # a node other than 0 whose ranks finished cleanly: rank 0 reports
        result = TrialResult.model_validate_json(result_json)
        if result.failure_class is None and i == 0:
            gang.ok = (result, self.worker(gang), False)
        elif result.failure_class is not None:
            self._failed(gang, _Failure(ended_at, result, worker))

    def _failed(self, gang: Gang, failure: _Failure) -> None:
        gang.failures.append(failure)
        if gang.first_failure_at is None:
            gang.first_failure_at = time.monotonic()

    def outcome(self, gang: Gang) -> tuple[TrialResult, str | None, bool] | None:
        """The trial's (result, worker, lost) once it is decided, else None; lost: the
        deciding failure was the cluster's (`Completed.lost`)."""
        if gang.ok is not None:
            return gang.ok
        if not gang.failures or gang.first_failure_at is None:
            return None
        settled = len(gang.done) == len(gang.refs)
        if not settled and time.monotonic() - gang.first_failure_at < SETTLE_S:
            return None
        # A rank's own failure first (failed_rank set), then the task that ended first.
        first = min(gang.failures, key=lambda f: (f.result.failed_rank is None, f.ended_at))
        return first.result, first.worker or self.worker(gang), first.lost

    def settle_left(self, gang: Gang) -> float | None:
        """Seconds until a gang with an undecided failure must be decided (None: none)."""
        if gang.ok is not None or gang.first_failure_at is None:
            return None
        return max(0.0, SETTLE_S - (time.monotonic() - gang.first_failure_at))

    def worker(self, gang: Gang) -> str | None:
        if not gang.workers and not gang.nodes:
            return None
        if len(gang.refs) == 1:
            return gang.workers.get(0)
        # Every rank's node, also for a task cancelled before it answered.
        ranks = (gang.workers.get(i) or f"?@{node[:8]}" for i, node in enumerate(gang.nodes))
        return " ".join(f"r{i}={w}" for i, w in enumerate(ranks))[:WORKER_CHARS]

    def _placed(self, gang: Gang) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        table = self._pg.placement_group_table(gang.pg)
        nodes = [table["bundles_to_node_id"][i] for i in range(len(gang.pg.bundle_specs))]
        k = gang.config.num_gpus
        gang.ready = None
        gang.since = time.monotonic()
        config_json = gang.config.model_dump_json()
        if len(nodes) == 1:  # one bundle of k GPUs: today's launcher starts every rank
            strategy = PlacementGroupSchedulingStrategy(gang.pg, placement_group_bundle_index=0)
            opts = {
                "num_cpus": 1,
                "num_gpus": k,
                "scheduling_strategy": strategy,
                "name": gang.name,
            }
            gang.refs = [self._task.options(**opts).remote(config_json, None)]
            return
        gang.nodes = nodes
        addr = self._address(nodes[0])
        port = pick_port(addr)
        for i in range(k):
            strategy = PlacementGroupSchedulingStrategy(gang.pg, placement_group_bundle_index=i)
            opts = {
                "num_cpus": 1,
                "num_gpus": 1,
                "scheduling_strategy": strategy,
                "name": f"{gang.name} rank {i}",
            }
            rdv = {"nnodes": k, "node_rank": i, "master_addr": addr, "master_port": port}
            gang.refs.append(self._task.options(**opts).remote(config_json, rdv))

    def _largest_node_gpus(self) -> int:
        nodes = [n for n in self._ray.nodes() if n.get("Alive")]
        return int(max((n.get("Resources", {}).get("GPU", 0) for n in nodes), default=0))

    def _address(self, node_id: str) -> str:
        for node in self._ray.nodes():
            if node["NodeID"] == node_id:
                return str(node["NodeManagerAddress"])
        raise RuntimeError(f"node {node_id} of the placement group is not in the cluster")

    def end(self, gang: Gang) -> None:
        """Cancel what still runs and give the GPUs back (any state: reserving, running, done)."""
        for i, ref in enumerate(gang.refs):
            if i not in gang.done:
                self._ray.cancel(ref, force=True)
        self._pg.remove_placement_group(gang.pg)


def _infra(message: str, gang: Gang) -> TrialResult:
    return TrialResult.failure(
        FailureClass.INFRA, message[:2000], wall_s=time.monotonic() - gang.since
    )
