"""What the read benchmarks share: a fresh database on the server, the planner's statistics,
the service as a subprocess, percentiles and the search policy a coordinator would hold."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from autotuner.search.objective import Objective
from autotuner.storage.session import Database, upgrade_database

ROOT = Path(__file__).resolve().parent.parent.parent
# The one coordinator the benchmark plays: its writer, its live recommendation, its end.
OWNER = "bench-coordinator"


def _quiet(event: Any) -> None:
    """A coordinator's events (the seeded running trials marked lost): not shown."""


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]

    return {"p50": q(0.5), "p95": q(0.95), "p99": q(0.99), "n": len(ordered)}


def rounded(samples: list[float]) -> dict[str, float]:
    return {k: round(v, 1) for k, v in _percentiles(samples).items()}


def _admin(base: str) -> Any:
    return create_engine(
        make_url(base).set(database="postgres"), isolation_level="AUTOCOMMIT", pool_size=1
    )


def server_facts(base: str) -> dict[str, str]:
    admin = _admin(base)
    try:
        with admin.connect() as c:
            return {
                "postgres": str(c.execute(text("SHOW server_version")).scalar()),
                "autovacuum": str(c.execute(text("SHOW autovacuum")).scalar()),
            }
    finally:
        admin.dispose()


@contextmanager
def fresh_database(base: str, keep: bool = False) -> Iterator[str]:
    """A new database on the server at `base`, migrated; dropped on exit unless `keep`."""
    name = f"autotuner_bench_{uuid.uuid4().hex[:10]}"
    admin = _admin(base)
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(base).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade_database(url)
        yield url
    finally:
        from autotuner.storage.session import dispose_engines

        dispose_engines()
        if keep:
            print(f"kept {url}")
        else:
            with admin.connect() as c:
                c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def vacuum_analyze(url: str) -> float:
    """What autovacuum does after bulk inserts (the visibility map, the planner's statistics),
    done once: this test server runs with autovacuum off, and a table never analyzed is
    planned as a few dozen rows (a page of 500 trials then read every trial above `after`
    and sorted them: 18 ms of SQL, not 0.5). Returns the seconds it took."""
    started = time.perf_counter()
    engine = create_engine(url, isolation_level="AUTOCOMMIT", pool_size=1)
    try:
        with engine.connect() as c:
            c.execute(text("VACUUM ANALYZE"))
    finally:
        engine.dispose()
    return round(time.perf_counter() - started, 1)


def cli_env() -> dict[str, str]:
    """This checkout first on the path; no token, no server or database from the caller; and
    bytecode written and read as an installed package has it (a checkout run with
    PYTHONDONTWRITEBYTECODE compiles every module of every cold process: 0.1 s of a CLI read)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("AUTOTUNER_TOKEN", "AUTOTUNER_SERVER", "AUTOTUNER_DATABASE_URL"):
        env.pop(name, None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def start_service(url: str, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autotuner.cli",
            "serve",
            "--db",
            url,
            "--port",
            str(port),
            "--no-coordinator",
            "--no-migrate",
            "--log-level",
            "warning",
        ],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            assert proc.stderr is not None
            raise RuntimeError(f"the service exited: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the service did not answer /healthz within 60 s")


@contextmanager
def running_service(url: str) -> Iterator[str]:
    """The service on `url` (no coordinator), its base URL while the block runs."""
    port = _free_port()
    proc = start_service(url, port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _policy(db: Database, study_id: str) -> Any:
    """The search policy a coordinator of this study holds (H200, as the seed's trials ran)."""
    from autotuner.executors.base import Target
    from autotuner.search.policy import SearchPolicy
    from autotuner.search.space import SearchSpace
    from autotuner.spec import ModelSpec
    from autotuner.storage.models import Study
    from bench.reads_lib.seed import H200

    with db.read() as s:
        study = s.get(Study, study_id)
        assert study is not None
        return SearchPolicy(
            space=SearchSpace.model_validate(study.space),
            model=ModelSpec.model_validate(study.model_spec),
            target=Target.from_fingerprint(H200),
            gpus_per_trial=study.gpus_per_trial,
            objective=Objective(study.objective),
            options=study.options,
        )
