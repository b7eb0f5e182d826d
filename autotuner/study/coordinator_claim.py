"""One live process per coordinator id (the `coordinators` table, migration 0009).

A study's lease names its owner by the coordinator id alone (`serve --coordinator-id`, default
serve@HOST:PORT). Two live services with one id (the same flag given twice, or the same
host:port on two machines) would each renew the other's leases as their own and mark the
other's running trials lost. So a service claims its id at start with a random instance
nonce, renews the claim while it runs (every heartbeat interval, for the lease's TTL) and
gives it back when it stops; a process that finds a live claim by another instance refuses to
start. A claim is taken over at once where it is plainly stale: left by this same pid on this
host (a container restarted in place), or by a pid on this host that no longer runs.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.exc import IntegrityError

from autotuner.inputs import UserError
from autotuner.storage.common import db_now
from autotuner.storage.coordinator_repo import CoordinatorRepo
from autotuner.storage.models import Coordinator
from autotuner.storage.session import Database

log = logging.getLogger("autotuner.service")


class CoordinatorClash(UserError):
    """Another live process runs under this coordinator id; the message says how to pick one."""


def new_instance() -> str:
    return uuid.uuid4().hex[:16]


def this_node() -> str:
    """This boot of this machine and this process's pid namespace: where a pid means one
    process (Linux; elsewhere the host name stands in)."""
    parts = []
    for path, read in (
        ("/proc/sys/kernel/random/boot_id", lambda p: Path(p).read_text().strip()),
        ("/proc/self/ns/pid", os.readlink),
    ):
        try:
            parts.append(read(path))
        except OSError:
            parts.append(socket.gethostname())
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


@dataclass
class CoordinatorClaim:
    db: Database
    coordinator_id: str
    ttl_s: float
    instance: str = field(default_factory=new_instance)
    host: str = field(default_factory=lambda: socket.gethostname()[:255])
    node: str = field(default_factory=this_node)
    pid: int = field(default_factory=os.getpid)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def take(self) -> None:
        """Claim the id, or CoordinatorClash if another live process holds it."""
        try:
            self._take()
        except IntegrityError:
            self._take()  # another process inserted the row first: judge its claim

    def _take(self) -> None:
        with self.db.session() as s:
            now = db_now(s)
            claims = CoordinatorRepo(s)
            row = claims.lock(self.coordinator_id)
            expires = now + dt.timedelta(seconds=self.ttl_s)
            if row is None:
                claims.insert(
                    Coordinator(
                        id=self.coordinator_id,
                        instance=self.instance,
                        host=self.host,
                        node=self.node,
                        pid=self.pid,
                        started_at=now,
                        expires_at=expires,
                    )
                )
                return
            ours = row.instance == self.instance
            if not ours and row.expires_at > now and not self._stale(row):
                raise self._clash(row, now)
            if not ours:  # free, expired or stale: ours from now on
                row.instance, row.host, row.node = self.instance, self.host, self.node
                row.pid, row.started_at = self.pid, now
            row.expires_at = expires

    def _stale(self, row: Coordinator) -> bool:
        """A claim left on this node by a process that is gone (or by our pid: then gone)."""
        if row.node != self.node:
            return False
        if row.pid == self.pid:
            return True
        try:
            os.kill(row.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another account's
            return False
        return False

    def _clash(self, row: Coordinator, now: dt.datetime) -> CoordinatorClash:
        left = max((row.expires_at - now).total_seconds(), 0.0)
        return CoordinatorClash(
            f"coordinator id {self.coordinator_id!r} is in use by another running service "
            f"(host {row.host}, pid {row.pid}): two services with one id would take each "
            "other's studies and mark their trials lost. Give this one its own id with "
            "--coordinator-id ID (or AUTOTUNER_COORDINATOR_ID); the default serve@HOST:PORT "
            f"differs per host and port. If that service has stopped, its claim expires in "
            f"{left:.0f} s"
        )

    def renew(self) -> bool:
        """Extend our claim; False if another instance has taken the id since."""
        with self.db.session() as s:
            expires = db_now(s) + dt.timedelta(seconds=self.ttl_s)
            return CoordinatorRepo(s).renew(self.coordinator_id, self.instance, expires)

    def keep(self, interval_s: float) -> None:
        """Renew the claim every `interval_s` in a background thread until `release`."""

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    if not self.renew():
                        log.error(
                            "coordinator id %r was claimed by another service while this one "
                            "could not renew it; stop one of them, or give each its own "
                            "--coordinator-id",
                            self.coordinator_id,
                        )
                except Exception as exc:  # the database is down: the claim expires, as leases
                    log.warning("cannot renew the coordinator claim: %s", str(exc)[:200])

        self._thread = threading.Thread(target=loop, name="autotuner-claim", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing and give the id back, so a successor starts at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        try:
            with self.db.session() as s:
                CoordinatorRepo(s).release(self.coordinator_id, self.instance)
        except Exception as exc:  # the claim simply expires
            log.warning("cannot release the coordinator claim: %s", str(exc)[:200])
