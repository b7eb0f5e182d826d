"""Fixtures for the service tests: the real `autotuner serve` process, a real Ray head.

    service = start_service(pg_url, executor=f"replay:{landscape_file}?slots=2")
    service.client.post("/api/studies", json=...)      # httpx, with the token
    service.kill9(); service = service.restart()        # same port, same coordinator id

The service runs as a subprocess on a free port, against the real Postgres (`pg_url`), with the
ReplayExecutor (`--executor replay:FILE`) where real trial execution is not the point and a
real Ray cluster (`ray_address`, started here with declared logical GPUs) where it is.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.direct_db import direct_connection
from tests.fakes import synthetic_landscape
from tests.polling import wait_for  # noqa: F401 (re-exported: older imports find it here)

REPO = Path(__file__).resolve().parents[2]
TOKEN = "test-token-4f9a"  # the services below run with this AUTOTUNER_TOKEN
KNOBS = {
    "micro_batch_size": [4, 8, 16, 32, 64, 128],
    "precision": ["fp32", "bf16"],
    "checkpointing": ["none", "full"],
    "optimizer": ["adamw-foreach", "adamw-fused"],
}
# An inline space over the landscape's knobs (attention math: trials may also run on a CPU).
REPLAY_SPACE: dict[str, Any] = {
    "name": "service-replay",
    "knobs": KNOBS,
    "fixed": {"attention": "math"},
    "defaults": {"micro_batch_size": 16, "precision": "bf16"},
    "measure": {
        "warmup_min_steps": 1,
        "warmup_max_steps": 3,
        "repeats": 2,
        "min_repeat_s": 0.1,
        "timeout_s": 60,
        "telemetry_hz": 0,
    },
}
# A space real CPU trials finish quickly in (a few seconds each, torch import included).
CPU_SPACE: dict[str, Any] = {
    "name": "service-cpu",
    "knobs": {
        "micro_batch_size": [1, 2, 4, 8],
        "optimizer": ["adamw-foreach", "adamw-fused"],
        "precision": ["fp32", "bf16"],
    },
    "fixed": {"attention": "math", "compile_mode": "none"},
    "defaults": {"micro_batch_size": 2, "precision": "fp32"},
    "measure": {
        "warmup_min_steps": 1,
        "warmup_max_steps": 3,
        "repeats": 2,
        "min_repeat_s": 0.1,
        "timeout_s": 60,
        "telemetry_hz": 0,
        "cpu_threads": 1,
    },
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Service:
    """One `autotuner serve` subprocess."""

    db_url: str
    log_path: Path
    port: int = field(default_factory=free_port)
    executor: str = "ray"
    ray_address: str | None = None
    token: str | None = TOKEN
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    # What runs `serve`: the CLI, or a test entry point that wraps it (tests/faults/fake_serve.py)
    module: str = "autotuner.cli"
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def start(self, timeout_s: float = 60.0) -> Service:
        env = {**os.environ, **self.env}
        for var in ("AUTOTUNER_TOKEN", "AUTOTUNER_SERVER", "AUTOTUNER_DATABASE_URL", "RAY_ADDRESS"):
            env.pop(var, None)
        if self.token:
            env["AUTOTUNER_TOKEN"] = self.token
        env["RAY_AUTH_MODE"] = "disabled"
        # The URL goes in the environment, not argv: a password in argv is visible in `ps`.
        env["AUTOTUNER_DATABASE_URL"] = self.db_url
        cmd = [
            sys.executable,
            "-m",
            self.module,
            "serve",
            "--port",
            str(self.port),
            "--executor",
            self.executor,
            "--log-level",
            "info",
            "--heartbeat-interval",
            "1",
            "--lease-ttl",
            "20",
            *self.args,
        ]
        if self.ray_address:
            cmd += ["--ray-address", self.ray_address]
        log = open(self.log_path, "ab")  # noqa: SIM115 (the child keeps it)
        log.write(f"\n=== start {' '.join(cmd)}\n".encode())
        log.flush()
        self.proc = self._spawn(cmd, env, log)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the service exited ({self.proc.returncode}):\n{self.log()}")
            try:
                health = httpx.get(f"{self.url}/healthz", timeout=2).json()
                if health["coordinator"]["state"] in ("running", "off"):
                    return self
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the service did not come up in {timeout_s:.0f} s:\n{self.log()}")

    def _spawn(self, cmd: list[str], env: dict[str, str], log: Any) -> subprocess.Popen[bytes]:
        """Start the process (a child of this one)."""
        return subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=log, stderr=log, start_new_session=True
        )

    def kill9(self) -> None:
        """SIGKILL the service process: no shutdown code runs."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def restart(self) -> Service:
        """A new process on the same port (so the same coordinator id) and database."""
        return self.start()

    def log(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@pytest.fixture
def start_service(tmp_path: Path) -> Iterator[Callable[..., Service]]:
    """Start services; every one started is stopped at the end (its log shown on failure)."""
    started: list[Service] = []

    def start(db_url: str, **kwargs: Any) -> Service:
        service = Service(db_url, tmp_path / f"service-{len(started)}.log", **kwargs)
        started.append(service)
        return service.start()

    yield start
    for service in started:
        service.stop()


@pytest.fixture(scope="session")
def landscape_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic landscape over KNOBS, as the JSON file `--executor replay:` reads."""
    path = tmp_path_factory.mktemp("landscape") / "landscape.json"
    entries = synthetic_landscape(KNOBS).entries
    path.write_text(
        json.dumps([{"params": p, "result": r.model_dump(mode="json")} for p, r in entries])
    )
    return path


@pytest.fixture(scope="session")
def ray_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Ray head on this machine declaring 2 logical GPUs (trials run on the CPU).

    Started with `ray start --head --block` as our own child and stopped by its process id
    (SIGTERM makes `ray start --block` take its cluster down), never with `ray stop`, which
    would stop every Ray on the machine.
    """
    port = free_port()
    log = tmp_path_factory.mktemp("ray") / "ray-head.log"
    # Trials run as they do for a user: the node's first one fresh, the later ones forked by
    # its pre-imported worker (workers/preload.py), which ends with this Ray node. Tests find
    # a trial's process by its pid file (tests/service/procs.py), whichever way it started.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "ray"),
                "start",
                "--head",
                "--block",
                f"--port={port}",
                "--num-cpus=2",
                "--num-gpus=2",
                "--include-dashboard=false",
                "--disable-usage-stats",
                "--ray-client-server-port",
                str(free_port()),
            ],
            stdout=out,
            stderr=out,
            env=env,
            start_new_session=True,
        )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while b"Ray runtime started" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start failed:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield address
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def study_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": {"preset": "tiny"}, "space": REPLAY_SPACE, "max_trials": 8}
    body.update(overrides)
    return body


def db_counts(db_url: str) -> tuple[int, int]:
    """(studies, trials) rows in the database, read directly."""
    from sqlalchemy import text

    with direct_connection(db_url) as connection:
        studies = connection.execute(text("SELECT count(*) FROM studies")).scalar_one()
        trials = connection.execute(text("SELECT count(*) FROM trials")).scalar_one()
        return studies, trials


def running_trial_numbers(db_url: str, study_id: str) -> list[int]:
    """The study's trials in state running, read directly from the database: what a dead
    service left (nothing else writes trials, so the answer holds until it restarts)."""
    from sqlalchemy import text

    with direct_connection(db_url) as connection:
        rows = connection.execute(
            text("SELECT number FROM trials WHERE study_id = :sid AND state = 'running'"),
            {"sid": study_id},
        )
        return sorted(row[0] for row in rows)
