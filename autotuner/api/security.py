"""Who may read and change what, checked before anything else runs, and the headers every
response carries.

- `TokenGate`: with a token configured, every request needs it, reads included, unless the
  operator started the service with `--public-reads` (then only changes need it). It runs before
  routing and before the body is read, so a stranger learns nothing about the API from a 422.
  API clients send `Authorization: Bearer <token>`; a browser signs in once at `/login`, which
  sets an HttpOnly cookie that is good for reads only (a page can't be tricked into a write).
- `SecurityHeaders`: a Content-Security-Policy that lets pages run only this origin's scripts
  and styles, `X-Frame-Options: DENY` and `X-Content-Type-Options: nosniff`, on every response.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, quote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE = "autotuner_session"
PUBLIC_PATHS = ("/healthz", "/login", "/static/")
READ_METHODS = ("GET", "HEAD")
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
# /docs (Swagger UI, served from this origin: autotuner.api.docs) runs under CSP itself. ReDoc
# at /redoc styles its page by inserting <style> elements (styled-components) and searches in a
# blob: worker, so that page alone allows inline styles and blob workers; scripts stay 'self'.
# The shortest token a service listening beyond localhost accepts: 32 characters are 128 bits
# as hex, what `openssl rand -hex 16` gives; a short word is guessed by whoever reaches the port.
MIN_PUBLIC_TOKEN_CHARS = 32
REDOC_CSP = CSP.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'") + (
    "; worker-src 'self' blob:"
)


def public_bind_refusal(host: str, token: str | None) -> str | None:
    """Why `serve --host HOST` must not start with this token, or None: beyond localhost every
    change needs a token, and one that whoever reaches the port cannot guess."""
    if loopback(host):
        return None
    fix = "export AUTOTUNER_TOKEN=$(openssl rand -hex 32), or listen on 127.0.0.1"
    if not token:
        return (
            f"--host {host} listens beyond this machine and AUTOTUNER_TOKEN is not set: anyone "
            f"who reaches the port could submit and cancel studies; {fix}"
        )
    if len(token) < MIN_PUBLIC_TOKEN_CHARS:
        return (
            f"--host {host} listens beyond this machine and AUTOTUNER_TOKEN has {len(token)} "
            f"characters, under the {MIN_PUBLIC_TOKEN_CHARS} a public service needs (a short "
            f"one can be guessed); {fix}"
        )
    return None


def loopback(host: str) -> bool:
    """Whether `host` is this machine only (a host name other than localhost may resolve to
    anything, so it is not)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def session_value(token: str) -> str:
    """The cookie a signed-in browser holds: derived from the token, never the token itself, so
    a leaked cookie is no bearer token for writes."""
    return hmac.new(token.encode(), b"autotuner dashboard session", hashlib.sha256).hexdigest()


def token_matches(given: str, token: str) -> bool:
    # Constant-time: the comparison must not reveal how much of a guess was right.
    return hmac.compare_digest(given.encode(), token.encode())


class TokenGate:
    """Refuse requests without the service's token (see the module docstring)."""

    def __init__(self, app: ASGIApp, token: str | None, public_reads: bool) -> None:
        self.app = app
        self.token = token
        self.public_reads = public_reads

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if method in READ_METHODS and not _is_api(path) and b"html" in _header(scope, b"accept"):
            # A person at a dashboard page: sign in, then come back here.
            target = path + (f"?{scope['query_string'].decode()}" if scope["query_string"] else "")
            await _send(send, 303, b"", [(b"location", f"/login?next={quote(target)}".encode())])
            return
        what = "reads need" if method in READ_METHODS else "this call changes state and needs"
        body = json.dumps(
            {"detail": f"{what} the service's token: send 'Authorization: Bearer <token>'"}
        ).encode()
        await _send(
            send,
            401,
            body,
            [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
        )

    def _allowed(self, scope: Scope) -> bool:
        path, method = scope["path"], scope["method"]
        if self.token is None or path.startswith(PUBLIC_PATHS) or path == "/login":
            return True
        reading = method in READ_METHODS
        if reading and self.public_reads:
            return True
        auth = _header(scope, b"authorization").decode("latin-1")
        scheme, _, given = auth.partition(" ")
        if scheme.lower() == "bearer" and token_matches(given.strip(), self.token):
            return True
        if reading:  # the browser's sign-in cookie: good for reads only
            cookie = SimpleCookie()
            try:
                cookie.load(_header(scope, b"cookie").decode("latin-1"))
            except Exception:  # a malformed Cookie header is no session
                return False
            session = cookie.get(COOKIE)
            return session is not None and token_matches(session.value, session_value(self.token))
        return False


class SecurityHeaders:
    """Add the CSP, frame and sniffing headers to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        csp = REDOC_CSP if scope["path"] == "/redoc" else CSP

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message.get("headers", [])}
                extra = [
                    (b"content-security-policy", csp.encode()),
                    (b"x-frame-options", b"DENY"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                ]
                message["headers"] = list(message.get("headers", [])) + [
                    (k, v) for k, v in extra if k not in names
                ]
            await send(message)

        await self.app(scope, receive, with_headers)


def login_form_token(body: bytes) -> str:
    """The token a sign-in form posted (application/x-www-form-urlencoded)."""
    return (parse_qs(body.decode("utf-8", "replace")).get("token") or [""])[0].strip()


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path on this site only (never `//host` or a URL)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _is_api(path: str) -> bool:
    return path.startswith("/api/") or path == "/api" or path.startswith(("/openapi", "/docs"))


def _header(scope: Scope, name: bytes) -> bytes:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return bytes(value)
    return b""


async def _send(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
