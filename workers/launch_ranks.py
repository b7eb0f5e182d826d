"""Start the rank processes of a multi-GPU trial and turn however they ended into one result.

Our own launcher, not torchrun: torchrun restarts or tears down workers by its own rules and
reports an exit status, while a trial needs a TrialResult that names the first rank that failed
and why (docs/measurement.md: a failure on any rank is the trial's failure, classified by the first
rank that failed; no rank may be left waiting in a collective).

Every rank is a process of its own with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
and the trial's environment (NCCL variables included) set before torch initialises anything:
forked from the node's pre-imported worker as a single trial is (workers/preload.py: no rank
pays torch's import, 6.8 s on the H200), or, while none answers yet, a fresh
`python -m workers.trial`. Fresh ranks share one process group, forked ones have one each; a kill
ends every group (loader and compile workers too), and each rank arms the parent-death signal as
a single trial does.

The first decisive event, in the order ranks end (pidfds: the launcher wakes as a rank exits):
  rank 0 wrote an ok result                  -> that result
  a rank wrote a failure result              -> that failure (failed_rank = its rank)
  a rank died by a signal                    -> `crash` naming the rank and the signal
  a rank exited non-zero without a result    -> `crash` with that rank's stderr tail
  still running at the wall-clock limit      -> `timeout`
A rank that stopped because a peer failed (PEER_FAILED_EXIT) decides nothing: the peer reports.
On any failure the whole group is killed at once.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autotuner.spec import FailureClass, TrialConfig, TrialResult, TrialStatus, process_env
from workers import phases, pidfile, preload_client, process
from workers.process import LIMIT_ENV, PEER_FAILED_EXIT
from workers.service_secrets import without_secrets

OK_GRACE_S = 3.0  # after rank 0's result, how long the others get to exit by themselves
FAILURE_SETTLE_S = 2.0  # after a failure result, how long a peer's death may still claim it


@dataclass(frozen=True)
class Rendezvous:
    """Where the ranks meet. One node: the defaults and a free port on this host.

    For several nodes the control plane runs this launcher once per node with the same
    master_addr/master_port (node 0's address) and that node's node_rank.
    """

    nproc_per_node: int
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int | None = None  # None: a free port on this host (single node only)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.nproc_per_node + local_rank


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port free on this host now (rank 0's store binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def rank_env(
    config: TrialConfig,
    rdv: Rendezvous,
    local_rank: int,
    port: int,
    limit_s: float,
    trial_tmp: Path | None = None,
):
    env = process.trial_env(config, trial_tmp)
    env.update(process_env(config))
    env.update(
        RANK=str(rdv.global_rank(local_rank)),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(rdv.world_size),
        LOCAL_WORLD_SIZE=str(rdv.nproc_per_node),
        MASTER_ADDR=rdv.master_addr,
        MASTER_PORT=str(port),
    )
    env[LIMIT_ENV] = str(limit_s)
    return without_secrets(env)  # config.env (process_env) cannot hand a rank one either


def run_rank_processes(
    config: TrialConfig,
    *,
    timeout_s: float | None = None,
    python: str = sys.executable,
    on_heartbeat: Callable[[], None] | None = None,
    nproc_per_node: int | None = None,
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
) -> TrialResult | None:
    """Run this node's ranks of `config` and wait for them (see the module doc).

    nproc_per_node defaults to config.num_gpus / nnodes. On a node other than node 0, returns
    None when every local rank finished cleanly (node 0's rank 0 reports the trial).
    """
    nproc = nproc_per_node or config.num_gpus // nnodes
    if master_port is None and nnodes > 1:
        raise ValueError("several nodes need one master_port agreed beforehand")
    rdv = Rendezvous(nproc, nnodes, node_rank, master_addr, master_port)
    limit = config.measure.timeout_s if timeout_s is None else timeout_s
    with tempfile.TemporaryDirectory(prefix="autotuner-ranks-") as tmp:
        run = _Ranks(config, rdv, Path(tmp), python, limit)
        try:
            run.start(rdv.master_port or free_port(rdv.master_addr))
            outcome = run.wait(on_heartbeat)
        finally:
            run.kill()
        return run.result(outcome)


class _Ranks:
    def __init__(self, config, rdv: Rendezvous, tmp: Path, python: str, limit_s: float):
        self.config, self.rdv, self.tmp, self.python, self.limit = config, rdv, tmp, python, limit_s
        self.workdir = process.trial_workdir()  # stable across trials: see its docstring
        self.procs: list[subprocess.Popen | preload_client.ForkedProcess] = []
        self.ended: dict[int, int] = {}  # local rank -> exit status, in the order they ended
        self.start_time = time.monotonic()

    def _path(self, local_rank: int, what: str) -> Path:
        return self.tmp / f"rank{local_rank}.{what}"

    def start(self, port: int) -> None:
        cfg = self.tmp / "config.json"
        cfg.write_text(self.config.model_dump_json())
        self.start_time = time.monotonic()
        spawned_at = repr(time.time())
        ranks = range(self.rdv.nproc_per_node)
        argv = [
            ["--config", str(cfg), "--result", str(self._path(r, "result.json"))] for r in ranks
        ]
        envs = [
            {
                **rank_env(self.config, self.rdv, r, port, self.limit, self.tmp),
                phases.SPAWNED_AT_ENV: spawned_at,
            }
            for r in ranks
        ]
        if not (preload_client.enabled() and self._fork(argv, envs)):
            self._spawn(argv, envs)
        # Which trial a rank runs, fresh or forked (whose command line is its server's).
        for r, p in enumerate(self.procs):
            pidfile.write(self.tmp, p.pid, pidfile.rank_name(r))

    def _fork(self, argv: list[list[str]], envs: list[dict[str, str]]) -> bool:
        """Every rank forked by the node's pre-imported worker, each in a session of its own;
        False, with nothing left running, when the server does not fork one (none answers
        yet: it is started for the next trial, and this one's ranks run fresh)."""
        for r, (args, env) in enumerate(zip(argv, envs, strict=True)):
            out, err = self._path(r, "stdout.log"), self._path(r, "stderr.log")
            proc = preload_client.fork_trial(self.python, args, env, str(self.workdir), out, err)
            if proc is None:
                self.kill()
                self.procs = []
                for path in self.tmp.glob("rank*.*"):
                    path.unlink()
                return False
            self.procs.append(proc)
        return True

    def _spawn(self, argv: list[list[str]], envs: list[dict[str, str]]) -> None:
        """Every rank a fresh interpreter. Rank 0 leads a new process group that the others
        join (a new session, as one trial gets, would forbid joining it: setpgid works only
        within one session)."""
        for r, (args, env) in enumerate(zip(argv, envs, strict=True)):
            group = 0 if r == 0 else self.procs[0].pid
            out_path, err_path = self._path(r, "stdout.log"), self._path(r, "stderr.log")
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                self.procs.append(
                    subprocess.Popen(
                        [self.python, "-m", "workers.trial", *args],
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,  # files, not pipes: a chatty rank never blocks
                        env=env,
                        cwd=self.workdir,
                        process_group=group,
                    )
                )

    @property
    def forked(self) -> bool:
        return bool(self.procs) and isinstance(self.procs[0], preload_client.ForkedProcess)

    @property
    def groups(self) -> list[int]:
        """The process groups to kill: each forked rank's own, or the one rank 0 leads."""
        return [p.pid for p in self.procs] if self.forked else [p.pid for p in self.procs[:1]]

    def kill(self) -> None:
        """SIGTERM the ranks' groups, SIGKILL what is left after the grace: no rank outlives the
        trial."""
        if not self.procs:
            return
        for group in self.groups:
            process.kill_group(group, signal.SIGTERM)
        deadline = time.monotonic() + process.KILL_GRACE_S
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
        for group in self.groups:
            process.kill_group(group, signal.SIGKILL)
        for p in self.procs:
            p.wait()

    def _wait_any(self, timeout_s: float) -> None:
        # pidfds wake the launcher the moment a rank exits, so the order ranks are seen to end
        # is the order they ended (a peer's error follows the rank that failed first).
        # A forked rank's connection to its server is readable once the rank has ended.
        fds = []
        try:
            poller = select.poll()
            for r, p in enumerate(self.procs):
                if r not in self.ended and p.returncode is None:
                    if isinstance(p, preload_client.ForkedProcess):
                        poller.register(p.fileno(), select.POLLIN)
                        continue
                    fd = os.pidfd_open(p.pid)
                    fds.append(fd)
                    poller.register(fd, select.POLLIN)
            poller.poll(max(0, int(timeout_s * 1000)))
        except (AttributeError, OSError):  # no pidfds here: a short poll instead
            time.sleep(min(timeout_s, 0.05))
        finally:
            for fd in fds:
                os.close(fd)

    def wait(self, on_heartbeat) -> tuple[str, int | None]:
        """("ok" | "failed" | "timeout" | "all-ended", the deciding local rank)."""
        next_beat = time.monotonic() + process.HEARTBEAT_INTERVAL_S
        while True:
            now = time.monotonic()
            remaining = self.limit - (now - self.start_time)
            if remaining <= 0:
                return "timeout", None
            self._wait_any(min(remaining, max(0.0, next_beat - now)))
            decided = self._decide(self._collect_ended())
            if decided is not None:
                verdict, r = decided
                if verdict == "ok":  # the others are past their last collective
                    self._wait_rest(OK_GRACE_S)
                elif not self._died(r):
                    # A failure result may be a knock-on (a peer's death broke a collective):
                    # give the other ranks a moment to end; a death among them is the cause.
                    verdict, r = self._settle(verdict, r)
                return verdict, r
            if len(self.ended) == len(self.procs):
                return "all-ended", None
            if on_heartbeat is not None and time.monotonic() >= next_beat:
                on_heartbeat()
                next_beat = time.monotonic() + process.HEARTBEAT_INTERVAL_S

    def _collect_ended(self) -> list[int]:
        newly = []
        for r, p in enumerate(self.procs):
            if r not in self.ended and p.poll() is not None:
                self.ended[r] = p.returncode
                newly.append(r)
        return newly

    def _decide(self, ranks: list[int]) -> tuple[str, int] | None:
        """The verdict among ranks seen ending together: a death (no result) first, since it
        is never a knock-on of a peer, then a written result, in rank order."""
        verdicts = [(v, r) for r in ranks if (v := self._verdict(r, self.ended[r])) is not None]
        deaths = [(v, r) for v, r in verdicts if self._died(r)]
        return (deaths or verdicts or [None])[0]

    def _died(self, r: int) -> bool:
        return r in self.ended and not self._path(r, "result.json").exists()

    def _settle(self, verdict: str, r: int) -> tuple[str, int]:
        deadline = time.monotonic() + FAILURE_SETTLE_S
        while len(self.ended) < len(self.procs) and time.monotonic() < deadline:
            self._wait_any(max(0.0, deadline - time.monotonic()))
            decided = self._decide(self._collect_ended())
            if decided is not None and self._died(decided[1]):
                return decided
        return verdict, r

    def _wait_rest(self, grace_s: float) -> None:
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.0, deadline - time.monotonic()))

    def _verdict(self, r: int, rc: int) -> str | None:
        if self._path(r, "result.json").exists():
            result = self._read(r)
            return "ok" if result is not None and result.status == TrialStatus.OK else "failed"
        if rc == 0 or rc == PEER_FAILED_EXIT:
            return None  # a rank > 0 that finished, or one that stopped for a failed peer
        return "failed"

    def _read(self, r: int) -> TrialResult | None:
        try:
            return TrialResult.model_validate_json(self._path(r, "result.json").read_text())
        except (OSError, ValueError):
            return None

    def _tail(self, r: int) -> str:
        tail = process.stderr_tail(self._path(r, "stderr.log"))
        return f"\nlast stderr lines of rank {self.rdv.global_rank(r)}:\n{tail}" if tail else ""

    def result(self, outcome: tuple[str, int | None]) -> TrialResult | None:
        verdict, r = outcome
        wall_s = time.monotonic() - self.start_time
        k = self.rdv.world_size
        if verdict == "timeout":
            tails = "".join(self._tail(i) for i in range(len(self.procs)))
            result = TrialResult.failure(
                FailureClass.TIMEOUT,
                f"trial still running after {self.limit:.0f} s; all {k} ranks were killed{tails}",
            )
        elif verdict == "all-ended":
            if self.rdv.node_rank != 0 and all(rc == 0 for rc in self.ended.values()):
                return None  # node 0 reports the trial
            stopped = [i for i, rc in self.ended.items() if rc == PEER_FAILED_EXIT]
            result = TrialResult.failure(
                FailureClass.CRASH,
                f"every rank ended but rank 0 wrote no result (ranks {stopped} stopped for a "
                f"failed peer that never reported){self._tail(0)}",
            )
        else:
            assert r is not None
            result = self._read(r) or self._death(r)
            if verdict == "failed":
                result.failed_rank = self.rdv.global_rank(r)
                if result.error_message and not result.error_message.startswith("rank "):
                    result.error_message = f"rank {result.failed_rank}: {result.error_message}"
        phases.finish(result, wall_s)
        result.num_ranks = k
        result.parallel = self.config.knobs.parallel
        result.process_start = "forked" if self.forked else "fresh"
        return result

    def _death(self, r: int) -> TrialResult:
        rc, rank = self.ended[r], self.rdv.global_rank(r)
        if rc < 0:
            name = signal.Signals(-rc).name if -rc in signal.valid_signals() else f"signal {-rc}"
            what = f"rank {rank} died by {name}"
        else:
            what = f"rank {rank} exited with status {rc} without a result"
        return TrialResult.failure(
            FailureClass.CRASH, f"{what}; the other ranks were killed{self._tail(r)}"
        )
