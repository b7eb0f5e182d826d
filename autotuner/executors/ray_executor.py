"""Run each trial as a Ray task that supervises the trial's own process.

The task runs the trial in a further subprocess (`workers.launch.run_trial_process`), so CUDA
contexts, compile caches, leaked memory and process-level settings (NCCL env, allocator) never
leak between trials, and a hung or crashed trial is killed and classified by process id. The
Ray worker itself never imports torch or touches a GPU, so it is reused (`max_calls=0`; Ray's
default for a GPU task is 1): Ray sets CUDA_VISIBLE_DEVICES (and OMP_NUM_THREADS) for each task
it runs and restores them after. A fresh Ray worker per trial cost 0.17-0.23 s per trial on a
2-core CPU (0.007 s reused, `tune examples/tiny.yaml --space cpu-demo --trials 8`) and about
1.0 s per trial on the H200 (16% of a 33-trial eager GPT-2 study's wall, before this change:
bench/results/h200_session_20261201/). Multi-GPU node tasks (placement.py) keep max_calls=1.

Concurrency comes from the cluster: one trial per `gpus_per_trial` free GPUs, each pinned by
Ray to its own (its task's CUDA_VISIBLE_DEVICES, which the trial's process inherits). On a
CPU-only cluster trials run one at a time, because two trials sharing cores would measure each
other. (tests/faults/test_concurrent_gpus.py; docs/architecture.md "Several trials at once".)

A trial on one GPU is one task with num_gpus=1. A trial on k > 1 GPUs first reserves them as a
placement group, one bundle per rank (PACK: on one node when one has k free GPUs), then runs one
task with num_gpus=k when they are on one node, or one task per rank across nodes, all meeting
at rank 0's node: `placement.py`. Its GPUs are given back when the trial ends, however it ends.

The hardware follows the cluster: the GPU count is re-read every few seconds, and when GPUs
appear (a GPU node that joined after the service started) one GPU is probed for its name,
capability and memory, without blocking the coordinator while the probe runs. Every Ray call
that can fail because the cluster is unreachable raises `ExecutorUnavailable`, which the
coordinator treats as an outage to wait out, not as a broken study. A trial never loses its
GPU reservation: a config that asks for GPUs is submitted with them, whatever the cluster
shows now (a GPU study waits for GPUs in the coordinator, study/pause.py).

The connection itself is watched (`health`, once a second at most): the GCS must answer on its
port and the node this driver submits through (its raylet) must be alive. When either fails,
every trial in flight is reported lost (`Completed.lost`) and the connection is dropped
(`ray.shutdown()`, in a thread of its own, so that /healthz says why at once): a driver left
connected to a dead GCS exits the whole process after 60 s ("Failed to connect to GCS"),
and one whose GCS comes back as a new cluster aborts
(`WrongClusterID`). Once the GCS answers again, the executor connects anew (`ray.init` at the
same address; a local cluster of its own is started again). Measured on Ray 2.60 with a test
cluster: the shutdown takes ~5 s with the GCS gone, and the process outlives the 60 s.
A Ray call made in the instant between the check and a GCS death can still block; the
scheduler's stuck-round check makes that visible (`/healthz`). A call to a raylet that died
raises instead of ending the process, whatever the process's parent (`_import_ray_as_driver`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotuner.executors.base import Completed, ExecutorUnavailable, Target
from autotuner.executors.placement import Gang, Placer
from autotuner.executors.ray_errors import lost_to_cluster
from autotuner.spec import FailureClass, TrialConfig, TrialResult

log = logging.getLogger(__name__)

# Extra seconds past a trial's own limit before the coordinator gives up on its Ray task
# (the subprocess timeout inside the task fires first; this catches a lost node).
TASK_GRACE_S = 60.0
TARGET_REFRESH_S = 5.0  # how often the cluster's GPU count is re-read
PROBE_TIMEOUT_S = 120.0  # a GPU probe that takes longer is abandoned and tried again
RESERVE_TIMEOUT_S = 300.0  # a k-GPU trial whose GPUs Ray cannot place this long is `infra`
HEALTH_CHECK_S = 1.0  # how often the connection is checked (a TCP connect and one GCS call)
PORT_PROBE_TIMEOUT_S = 2.0  # a GCS or raylet port that does not accept within this is down


def _run_trial_task(config_json: str) -> tuple[str, str]:
    """Runs on a Ray worker: one trial in a fresh subprocess; returns (result json, worker)."""
    from workers.launch import run_trial_process

    config = TrialConfig.model_validate_json(config_json)
    result = run_trial_process(config)
    return result.model_dump_json(), worker_name()


def worker_name() -> str:
    """Where a trial ran, as its row's `worker` says: host and process, and the GPU Ray gave
    the task (its CUDA_VISIBLE_DEVICES, the trial's process's too), so on a node running one
    trial per GPU each trial names its own."""
    where = f"{socket.gethostname()}:{os.getpid()}"
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f"{where} gpu={gpus}" if gpus else where


def _probe_task() -> dict[str, Any]:
    from workers.launch import prestart_preload
    from workers.probe import nvidia_driver_present, probe_gpus

    if nvidia_driver_present():  # a real GPU node: its trials will come
        prestart_preload()  # its torch import overlaps the probe's, before the first trial
    return probe_gpus()


@dataclass
class _Running:
    ref: Any  # the trial's task; None for a trial on several GPUs (its gang's tasks)
    config: TrialConfig
    started: float
    gang: Gang | None = None


class RayExecutor:
    """Trials as Ray tasks on a local or remote cluster (`RAY_ADDRESS` / `address`)."""

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: int | None = None,
        num_gpus: int | None = None,
        placement_strategy: str = "PACK",
    ) -> None:
        # Ray's C++ failure handler answers SIGTERM with a stack dump before the service's own
        # graceful stop runs; a stop asked for is no crash (RAY_DISABLE_FAILURE_SIGNAL_HANDLER=0
        # brings it back). Read once, when ray is first imported.
        os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
        self._ray = ray = _import_ray_as_driver()
        self._started_ray = not ray.is_initialized()  # ours to shut down in close()
        self._init: dict[str, Any] | None = None  # how to connect again (None: not ours)
        if self._started_ray:
            # Ray's start-up notices (auth token, dashboard) are noise on a user's terminal.
            logging.getLogger("ray").setLevel(logging.ERROR)
            address = address or os.environ.get("RAY_ADDRESS") or None
            kwargs: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "logging_level": logging.ERROR,
            }
            if address is None:
                # A new local cluster, started on demand ("local": never silently join another
                # cluster running on this machine); num_gpus lets tests declare logical GPUs.
                address = "local"
                kwargs.update(num_cpus=num_cpus or os.cpu_count(), num_gpus=num_gpus)
            self._init = {"address": address, **kwargs}
            ray.init(**self._init)
        self._connected()
        self._down: str | None = None  # why the cluster cannot run trials (None: it can)
        self._letting_go: threading.Thread | None = None  # a dropped connection's shutdown
        self._health_at = -float("inf")
        self._lost: list[Completed] = []  # trials a dropped connection took, to report
        self._task = ray.remote(max_calls=0, max_retries=0)(_run_trial_task)
        self._placer = Placer(ray, placement_strategy)
        self._running: dict[str, _Running] = {}
        self._counter = 0
        self._target: Target | None = None
        self._target_read_at = -float("inf")
        self._probe: tuple[Any, float] | None = None  # (ref, started) of a running GPU probe
        self._gpu_info: dict[str, Any] | None = None  # what the last finished probe saw

    # ------------------------------------------------------------------ Executor

    def target(self) -> Target:
        now = time.monotonic()
        if self._down is not None:  # no cluster to ask: what it was
            return self._target or Target("cpu", 0)
        if self._target is not None and now - self._target_read_at < TARGET_REFRESH_S:
            return self._target
        gpus = int(self._gcs(self._ray.cluster_resources).get("GPU", 0))
        self._target_read_at = now
        if gpus == 0:
            self._target = Target("cpu", 0)
        elif self._gpu_info is not None:
            self._target = _gpu_target(gpus, self._gpu_info)
        elif self._probe_done(first=self._target is None):
            assert self._gpu_info is not None
            self._target = _gpu_target(gpus, self._gpu_info)
        # else: the probe of newly joined GPUs still runs; keep what we had until it answers.
        if self._target is None:
            self._target = Target("cpu", 0)
        return self._target

    def _probe_done(self, *, first: bool) -> bool:
        """Start or check the GPU probe; True once it has answered. The first probe (at start,
        before any study runs) may wait for the answer; later ones never block the caller."""
        if self._probe is None:
            task = self._ray.remote(num_gpus=1, max_calls=1)(_probe_task)
            self._probe = (self._call(task.remote), time.monotonic())
        ref, started = self._probe
        ready, _ = self._call(
            self._ray.wait, [ref], num_returns=1, timeout=PROBE_TIMEOUT_S if first else 0
        )
        if not ready:
            if time.monotonic() - started > PROBE_TIMEOUT_S:
                self._ray.cancel(ref, force=True)
                self._probe = None  # no GPU was free for the probe: ask again later
            return False
        self._probe = None
        try:
            self._gpu_info = self._ray.get(ref)
        except Exception:
            return False  # the probe's worker died: probe again on the next refresh
        return True

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """A Ray call whose failure means the cluster is unreachable, not a broken trial."""
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise ExecutorUnavailable(f"Ray: {type(exc).__name__}: {exc}"[:500]) from exc

    def _gcs(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """A Ray call that asks the GCS, made only while the GCS's port answers: a call to a
        dead GCS blocks until it is back (and exits the process after 60 s). Measured: the
        target's refresh, in the second between two health checks, blocked the coordinator's
        thread when the GCS was killed. Drops the connection where it does not answer."""
        if not _port_open(self._gcs_address):
            self._drop(self._gcs_down())
            raise ExecutorUnavailable(self._down or "")
        return self._call(fn, *args, **kwargs)

    def _gcs_down(self) -> str:
        return (
            f"the Ray GCS at {self._gcs_address} does not answer: the head node is down or "
            "restarting; trials wait for it, the service connects again when it is back"
        )

    def free_slots(self, gpus_per_trial: int) -> int:
        if self._down is not None:
            return 0
        target = self.target()
        if target.device_type == "cpu":
            return 0 if self._running else 1
        available = int(self._gcs(self._ray.available_resources).get("GPU", 0))
        # available_resources lags behind submissions; count what we have in flight ourselves.
        in_flight = sum(r.config.num_gpus for r in self._running.values())
        free = min(available, target.gpus_total - in_flight)
        return max(0, free // max(gpus_per_trial, 1))

    def submit(self, config: TrialConfig) -> str:
        if self._down is not None:
            raise ExecutorUnavailable(self._down)
        self._counter += 1
        handle = f"t{self._counter}"
        # The task's name shows in `ray list tasks`, the Ray dashboard and the worker's process
        # title (`ray::trial st-1234abcd#7`), so an operator can tell which trial is which.
        name = f"trial {config.study_id or '-'}#{config.trial_number}"
        # A trial that asks for GPUs always reserves them, whatever the cluster shows now:
        # dropping them when the GPU node had left ran a GPU study's trials on the CPU.
        if config.num_gpus > 1:
            gang = self._gcs(self._placer.reserve, config, name)
            self._running[handle] = _Running(None, config, time.monotonic(), gang)
            return handle
        options: dict[str, Any] = {"num_cpus": 1, "name": name}
        if config.num_gpus:
            options["num_gpus"] = config.num_gpus
        ref = self._call(self._task.options(**options).remote, config.model_dump_json())
        self._running[handle] = _Running(ref, config, time.monotonic())
        return handle

    def collect(self, timeout_s: float) -> list[Completed]:
        if self._lost:  # taken by a dropped connection (health)
            lost, self._lost = self._lost, []
            return lost
        if not self._running:
            time.sleep(min(timeout_s, 0.05))
            return []
        by_ref: dict[Any, str] = {}
        for h, r in self._running.items():
            for ref in [r.ref] if r.gang is None else r.gang.waiting_on():
                by_ref[ref] = h
            if r.gang is not None:  # a failure waiting for the other nodes' reports
                left = self._placer.settle_left(r.gang)
                timeout_s = timeout_s if left is None else min(timeout_s, left)
        ready: list[Any] = []
        if by_ref:
            ready, _ = self._call(self._ray.wait, list(by_ref), num_returns=1, timeout=timeout_s)
        if ready:  # take everything else that is already done too
            ready, _ = self._call(self._ray.wait, list(by_ref), num_returns=len(by_ref), timeout=0)
        done = []
        for ref in ready:
            running = self._running[by_ref[ref]]
            if running.gang is None:
                done.append(self._finish(by_ref[ref]))
            else:
                self._call(self._placer.advance, running.gang, ref)
        for h, r in list(self._running.items()):
            if r.gang is not None and (outcome := self._placer.outcome(r.gang)) is not None:
                self._end(h)
                done.append(Completed(h, *outcome))
        done += self._expire_overdue()
        return done

    def cancel(self, handle: str) -> None:
        self._lost = [c for c in self._lost if c.handle != handle]
        if handle in self._running:
            self._end(handle)

    def _end(self, handle: str) -> None:
        """Forget a trial and stop its tasks (a gang's also gives its GPUs back)."""
        running = self._running.pop(handle)
        if running.gang is not None:
            self._call(self._placer.end, running.gang)
        else:
            self._call(self._ray.cancel, running.ref, force=True)

    def running(self) -> list[str]:
        return [*self._running, *(c.handle for c in self._lost)]

    def health(self) -> str | None:
        now = time.monotonic()
        if now - self._health_at < HEALTH_CHECK_S:
            return self._down
        self._health_at = now
        if self._down is None:
            why = self._connection_problem()
            if why is not None:
                self._drop(why)
                self._raylet_gone(now)
            return self._down
        # Dropped: connect again once there is a cluster to connect to.
        own_local = self._init is not None and self._init["address"] == "local"
        if not own_local and (self._raylet_gone(now) or not _port_open(self._gcs_address)):
            return self._down
        self._let_go()
        try:
            self._ray.init(**(self._init or {"address": self._gcs_address}))
            self._connected()
        except Exception as exc:
            with_reason = self._down.split("; connecting again failed")[0]
            self._down = f"{with_reason}; connecting again failed: {type(exc).__name__}: {exc}"
            self._down = self._down[:500]
            self._disconnect()
            return self._down
        log.warning("Ray cluster at %s connected again (it was: %s)", self._gcs_address, self._down)
        self._down = None
        self._target_read_at = -float("inf")  # the GPUs may differ: read them now
        return None

    def _connected(self) -> None:
        """Note where the driver is connected: the GCS's address and its own node's id."""
        context = self._ray.get_runtime_context()
        self._gcs_address: str = context.gcs_address
        self._node_id: str = context.get_node_id()
        self._raylet_gone_since: float | None = None

    def _raylet_gone(self, now: float) -> bool:
        """Whether no raylet of the cluster runs on this host, for the dropped connection to
        be made again through (noted since when, for `raylet_lost_s`). A local cluster of our
        own is started again whole, its raylet with it: never."""
        own_local = self._init is not None and self._init["address"] == "local"
        gone = not own_local and not _raylet_on_this_host(self._gcs_address)
        if not gone:
            self._raylet_gone_since = None
        elif self._raylet_gone_since is None:
            self._raylet_gone_since = now
        return gone

    def raylet_lost_s(self) -> float | None:
        """Seconds the health check has found no raylet of the cluster on this host to submit
        through (None: there is one). Nothing here starts one again: what started it must
        (`serve --exit-after-raylet-lost` exits so that its supervisor does)."""
        since = self._raylet_gone_since
        return None if since is None else time.monotonic() - since

    def _connection_problem(self) -> str | None:
        """Why the connection cannot run trials, or None: the GCS's port, then this driver's
        node (its raylet) as the GCS sees it, then the raylet's own port."""
        if not _port_open(self._gcs_address):
            return self._gcs_down()
        try:
            nodes = self._ray.nodes()
        except Exception as exc:
            return f"the Ray GCS at {self._gcs_address} failed a call: {type(exc).__name__}: {exc}"
        mine = next((n for n in nodes if n.get("NodeID") == self._node_id), None)
        raylet = (
            None
            if mine is None
            else f"{mine.get('NodeManagerAddress')}:{mine.get('NodeManagerPort')}"
        )
        if mine is None or not mine.get("Alive") or not _port_open(raylet):
            return (
                f"the Ray node this service submits through ({self._node_id[:8]}) is dead (its "
                "raylet stopped); the service connects again when the cluster answers"
            )
        return None

    def _drop(self, why: str) -> None:
        """Give up the connection: every trial in flight is lost (`Completed.lost`)."""
        log.warning("Ray cluster unavailable: %s", why)
        self._down = why[:500]
        now = time.monotonic()
        for handle, running in self._running.items():
            failure = TrialResult.failure(FailureClass.INFRA, why, wall_s=now - running.started)
            self._lost.append(Completed(handle, failure, lost=True))
        self._running.clear()
        self._probe = None
        # `ray.shutdown()` takes ~5 s with the GCS gone (longer on a loaded host) and the
        # coordinator says the cluster is down (/healthz 503) only once its round ends: the
        # connection is let go in a thread of its own. Nothing calls Ray until it is made
        # again, which waits for that thread (`_let_go`).
        self._letting_go = threading.Thread(
            target=self._disconnect, name="autotuner-ray-shutdown", daemon=True
        )
        self._letting_go.start()

    def _let_go(self) -> None:
        """Wait for a dropped connection's shutdown to end (before connecting or closing)."""
        if self._letting_go is not None:
            self._letting_go.join()
            self._letting_go = None

    def _disconnect(self) -> None:
        try:
            self._ray.shutdown()
        except Exception:  # already half gone; nothing of it is used again
            log.exception("ray.shutdown after the cluster failed")

    def close(self) -> None:
        """Disconnect; a local cluster this executor started goes down with its processes."""
        self._let_go()
        if self._started_ray and self._ray.is_initialized():
            self._ray.shutdown()
        self._started_ray = False

    # ------------------------------------------------------------------ helpers

    def _finish(self, handle: str) -> Completed:
        running = self._running.pop(handle)
        try:
            result_json, worker = self._ray.get(running.ref)
            return Completed(handle, TrialResult.model_validate_json(result_json), worker)
        except Exception as exc:  # the task itself failed: worker or node lost, scheduling
            if lost_to_cluster(exc):
                # A node may have gone, its GPUs with it, or the cluster itself: look at both
                # before anything else is launched.
                self._target_read_at = self._health_at = -float("inf")
            return Completed(
                handle,
                TrialResult.failure(
                    FailureClass.INFRA,
                    f"Ray task failed: {type(exc).__name__}: {exc}"[:2000],
                    wall_s=time.monotonic() - running.started,
                ),
                lost=lost_to_cluster(exc),
            )

    def _expire_overdue(self) -> list[Completed]:
        now = time.monotonic()
        out = []
        for handle, running in list(self._running.items()):
            gang, started = running.gang, running.started
            if gang is not None and gang.reserving:
                if now - gang.since > RESERVE_TIMEOUT_S:
                    message = (
                        f"Ray could not place the trial's {running.config.num_gpus} GPUs "
                        f"within {RESERVE_TIMEOUT_S:.0f} s"
                    )
                else:
                    continue
            else:
                started = started if gang is None else gang.since  # a gang: since its launch
                limit = running.config.measure.timeout_s + TASK_GRACE_S
                if now - started <= limit:
                    continue
                message = (
                    f"no answer from the trial's Ray tasks {limit:.0f} s after launch "
                    f"(its own limit is {running.config.measure.timeout_s:.0f} s); "
                    f"a worker node may be lost"
                )
            self._end(handle)
            failure = TrialResult.failure(FailureClass.INFRA, message, wall_s=now - started)
            out.append(Completed(handle, failure))
        return out


RAYLET_PID_ENV = "RAY_RAYLET_PID"


def _import_ray_as_driver() -> Any:
    """`import ray`, such that losing the raylet never ends this process.

    A Ray process whose call to its local raylet fails exits at once (`_Exit(1)`: no traceback,
    no shutdown) when it takes that raylet for dead: the pid in $RAY_RAYLET_PID is gone, or,
    without one (a driver: Ray sets it in its own workers only), its parent process is pid 1.
    A service under systemd or tini, or left by the shell that started it, has parent 1:
    kill -9 of its host's raylet ended it within a second (Ray 2.60, tests/faults/
    test_cluster_faults.py), where one with another parent waited and connected again. Named
    as the raylet, this process is alive for as long as the check can run, so the failed call
    is an error, the health check sees the dead raylet and the executor waits it out. Ray reads
    the variable when it is imported; it leaves the environment right after, so no process
    started later (a local cluster's raylet or workers, a trial) inherits it.
    """
    if RAYLET_PID_ENV in os.environ or "ray" in sys.modules:  # a Ray worker, or too late
        import ray

        return ray
    os.environ[RAYLET_PID_ENV] = str(os.getpid())
    try:
        import ray
    finally:
        del os.environ[RAYLET_PID_ENV]
    return ray


def _port_open(address: str | None) -> bool:
    """Whether host:port accepts a TCP connection (a Ray GCS or raylet that is up)."""
    if not address:
        return False
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=PORT_PROBE_TIMEOUT_S):
            return True
    except (OSError, ValueError):
        return False


def _raylet_on_this_host(gcs_address: str) -> bool:
    """Whether a raylet of the cluster at `gcs_address` runs on this host. A driver's `ray.init`
    connects through one and waits up to 60 s for it (measured: the head's raylet killed, its
    GCS alive, every attempt blocked the coordinator's thread 60 s), so without one there is
    nothing to connect through yet. Read from the raylets' command lines (`--gcs-address=`),
    as `ray.init` finds them; where /proc cannot tell, try."""
    flag = f"--gcs-address={gcs_address}".encode()
    try:
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            with contextlib.suppress(OSError):  # a process that ended meanwhile
                args = cmdline.read_bytes().split(b"\0")
                if args[0].endswith(b"/raylet") and flag in args:
                    return True
    except OSError:
        return True
    return False


def _gpu_target(gpus: int, info: dict[str, Any]) -> Target:
    cc = info.get("compute_capability")
    return Target("cuda", gpus, info.get("name"), tuple(cc) if cc else None, info.get("memory_gib"))
