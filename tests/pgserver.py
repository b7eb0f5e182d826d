"""A PostgreSQL server of the test's own, for tests that stop, restart or cut off the database.

The machine's shared server (`pg_url`) must never go down under other tests or other people;
a test that needs an outage gets a private one instead:

    def test_outage(private_postgres: PrivatePostgres) -> None:
        service = start_service(private_postgres.url)       # a migrated, empty database
        private_postgres.restart(down_s=3)                   # stop, stay down 3 s, start
        private_postgres.stop(); ...; private_postgres.start()

`PrivatePostgres` runs `initdb` in a fresh directory under /tmp and `pg_ctl start` on a free
port of 127.0.0.1 (trust auth, user `postgres`, fsync off: throwaway data). As root the server
runs as the `postgres` user (Postgres refuses to run as root). Its log is `log_path`, shown when
it fails to start. The fixture `private_postgres` (tests/conftest.py) gives each test a started
server with the database `autotuner` migrated by the project's Alembic, and removes it all at
the end. The binaries come from $AUTOTUNER_TEST_PG_BINDIR, else the PATH, else the newest
/usr/lib/postgresql/*/bin; without them the fixture skips the test.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

BINDIR_ENV = "AUTOTUNER_TEST_PG_BINDIR"
DATABASE = "autotuner"


def find_bindir() -> Path | None:
    """Where initdb and pg_ctl are, or None."""
    if os.environ.get(BINDIR_ENV):
        return Path(os.environ[BINDIR_ENV])
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivatePostgres:
    """One throwaway PostgreSQL server: `create()` once, then `start`/`stop`/`restart` at will,
    `destroy()` at the end. `url` is the migrated database's SQLAlchemy URL."""

    def __init__(self, bindir: Path | None = None) -> None:
        found = bindir or find_bindir()
        if found is None:
            raise FileNotFoundError(f"no initdb/pg_ctl found (set ${BINDIR_ENV})")
        self.bindir = found
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="autotuner-pg-"))
        self.data_dir = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log_path = self.root / "postgres.log"
        # Postgres refuses to run as root: then it runs as the `postgres` user, which owns root.
        self._as_user: str | None = "postgres" if os.geteuid() == 0 else None

    # ---------------------------------------------------------------- addresses

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def url_for(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@{self.host}:{self.port}/{database}"

    @property
    def url(self) -> str:
        """The migrated database (`autotuner`)."""
        return self.url_for(DATABASE)

    # ---------------------------------------------------------------- life cycle

    def create(self, timeout_s: float = 60.0) -> PrivatePostgres:
        """initdb, start, create the `autotuner` database and migrate it to head."""
        self.socket_dir.mkdir()
        if self._as_user:
            user = pwd.getpwnam(self._as_user)
            for path in (self.root, self.socket_dir):
                os.chown(path, user.pw_uid, user.pw_gid)
        self._pg(
            "initdb",
            "-D",
            str(self.data_dir),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
            timeout_s=timeout_s,
        )
        self.start(timeout_s)
        self._create_database(DATABASE)
        from autotuner.storage.session import upgrade_database

        upgrade_database(self.url)
        return self

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the server and return once it accepts connections."""
        options = (
            f"-p {self.port} -k {self.socket_dir} -c listen_addresses={self.host} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        try:
            self._pg(
                "pg_ctl",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_path),
                "-o",
                options,
                "-w",
                "-t",
                str(int(timeout_s)),
                "start",
                timeout_s=timeout_s + 10,
            )
        except RuntimeError as error:
            raise RuntimeError(f"{error}\n--- {self.log_path}:\n{self.log()}") from None

    def stop(self, mode: str = "fast", timeout_s: float = 60.0) -> None:
        """Stop the server (`fast`: roll back open transactions and close every connection;
        `immediate`: like a crash) and return once it is down."""
        self._pg(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-m",
            mode,
            "-w",
            "-t",
            str(int(timeout_s)),
            "stop",
            timeout_s=timeout_s + 10,
        )

    def restart(self, down_s: float = 3.0) -> None:
        """Stop, stay down `down_s` seconds (an outage a client cannot miss), start again."""
        self.stop()
        time.sleep(down_s)  # the length of the outage, not a wait for something
        self.start()

    def running(self) -> bool:
        return (self.data_dir / "postmaster.pid").exists() and self._status() == 0

    def destroy(self) -> None:
        """Stop the server if it runs (immediately) and delete its files."""
        if self.data_dir.exists() and self._status() == 0:
            with contextlib.suppress(RuntimeError):
                self.stop(mode="immediate", timeout_s=30)
        shutil.rmtree(self.root, ignore_errors=True)

    def log(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    # ---------------------------------------------------------------- helpers

    def _create_database(self, name: str) -> None:
        from sqlalchemy import create_engine, text
        from sqlalchemy.pool import NullPool

        engine = create_engine(
            self.url_for("postgres"), isolation_level="AUTOCOMMIT", poolclass=NullPool
        )
        try:
            with engine.connect() as connection:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            engine.dispose()

    def _status(self) -> int:
        return self._run(["pg_ctl", "-D", str(self.data_dir), "status"], timeout_s=30).returncode

    def _pg(self, program: str, *args: str, timeout_s: float) -> None:
        done = self._run([program, *args], timeout_s=timeout_s)
        if done.returncode != 0:
            raise RuntimeError(
                f"{program} {' '.join(args)} failed ({done.returncode}):\n{done.stdout.strip()}"
            )

    def _run(self, argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / argv[0]), *argv[1:]]
        if self._as_user:
            command = ["runuser", "-u", self._as_user, "--", *command]
        return subprocess.run(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=self.root,  # a directory the server's user can enter
            timeout=timeout_s,
            check=False,
        )
