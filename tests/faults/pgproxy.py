"""A TCP proxy between a client and the real PostgreSQL that can lose, pause and reset.

    proxy = PgProxy("127.0.0.1", 5432).start()
    url = proxy.url(pg_url)                       # the same database, through the proxy
    proxy.lose_commit_ack(after=b"UPDATE trials")  # the next such transaction commits on the
                                                   # server, but its client never hears so
    proxy.pause(5.0)                               # no byte moves either way for 5 s
    proxy.reset()                                  # every open connection is cut now

Losing an acknowledgement: the client's `COMMIT` (a simple-protocol Query message) is forwarded
to the server, which commits; the proxy then closes the client's connection instead of relaying
the answer. The client sees a connection error for a transaction that did commit: what a
failover or a dropped network link at the wrong moment looks like.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field

from sqlalchemy.engine import make_url

COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"  # Query message: 'Q', int32 length 11, "COMMIT\0"


@dataclass
class _Conn:
    client: socket.socket
    server: socket.socket
    sent: bytearray = field(default_factory=bytearray)  # this transaction's client bytes
    closed: bool = False
    muted: bool = False  # the server's answers are dropped, not relayed

    def close(self) -> None:
        self.closed = True
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


class PgProxy:
    """Forwards 127.0.0.1:<port> to the upstream server, with faults on demand."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._conns: list[_Conn] = []
        self._lock = threading.Lock()
        self._lose_after: bytes | None = None
        self.acks_lost = 0
        self._paused_until = 0.0
        self._stopped = False

    def start(self) -> PgProxy:
        threading.Thread(target=self._accept, daemon=True, name="pgproxy").start()
        return self

    def url(self, upstream_url: str) -> str:
        """`upstream_url` with its host and port replaced by the proxy's."""
        return (
            make_url(upstream_url)
            .set(host="127.0.0.1", port=self.port)
            .render_as_string(hide_password=False)
        )

    # ------------------------------------------------------------------ faults

    def lose_commit_ack(self, *, after: bytes) -> None:
        """The next transaction whose statements contain `after` commits on the server, and
        its client's connection is cut before the answer (once; `acks_lost` counts)."""
        self._lose_after = after

    def pause(self, seconds: float) -> None:
        """Hold every byte in both directions for `seconds` (a network partition)."""
        self._paused_until = time.monotonic() + seconds

    def reset(self) -> None:
        """Cut every open connection now."""
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()

    def stop(self) -> None:
        self._stopped = True
        self.reset()
        with contextlib.suppress(OSError):
            self._listener.close()

    # ------------------------------------------------------------------ plumbing

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            conn = _Conn(client, server)
            with self._lock:
                self._conns.append(conn)
            threading.Thread(target=self._upstream, args=(conn,), daemon=True).start()
            threading.Thread(target=self._downstream, args=(conn,), daemon=True).start()

    def _hold(self) -> None:
        while time.monotonic() < self._paused_until and not self._stopped:
            time.sleep(0.05)

    def _upstream(self, conn: _Conn) -> None:
        """Client -> server, watching for the COMMIT of an armed transaction."""
        try:
            while not conn.closed:
                data = conn.client.recv(65536)
                if not data:
                    break
                self._hold()
                conn.sent += data
                armed = self._lose_after
                if COMMIT in data and armed is not None and armed in conn.sent:
                    self._lose_after = None
                    self.acks_lost += 1
                    conn.muted = True  # the client must not hear the server's "COMMIT" answer
                    conn.server.sendall(data)
                    time.sleep(0.3)  # let the server commit before the link goes
                    break
                conn.server.sendall(data)
                if COMMIT in data or b"ROLLBACK" in data:
                    conn.sent.clear()
        except OSError:
            pass
        conn.close()

    def _downstream(self, conn: _Conn) -> None:
        try:
            while not conn.closed:
                data = conn.server.recv(65536)
                if not data:
                    break
                self._hold()
                if conn.closed or conn.muted:
                    break
                conn.client.sendall(data)
        except OSError:
            pass
        conn.close()
