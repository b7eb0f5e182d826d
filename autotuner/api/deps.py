"""Edge checks every request passes before a route runs: the body-size limit and the bearer
token on mutating calls. Routes depend on these; the app installs them."""

from __future__ import annotations

import hmac
import json
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 1024 * 1024


class BodySizeLimit:
    """Refuse request bodies over `max_bytes` with 413, by header and while streaming."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None:
            try:
                too_big = int(length) > self.max_bytes
            except ValueError:
                await _send_json(send, 400, "Content-Length is not a number")
                return
            if too_big:
                await self._refuse(send)
                return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        await _send_json(send, 413, _TooLarge(self.max_bytes).detail)


class _TooLarge(HTTPException):
    # An HTTPException, so FastAPI's body reader passes it through (it turns any other error
    # while reading into a generic 400) and the client gets the 413 with its remedy.
    def __init__(self, max_bytes: int) -> None:
        super().__init__(
            413,
            f"request body over {max_bytes // 1024} KiB; send a smaller model spec or space "
            "(a space lists knob values, not configurations)",
        )


async def _send_json(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
        }
    )
    await send({"type": "http.response.body", "body": body})


_bearer = HTTPBearer(auto_error=False, description="The service's AUTOTUNER_TOKEN")


def require_token(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    """Mutating calls need `Authorization: Bearer <AUTOTUNER_TOKEN>` when the service has one."""
    token: str | None = request.app.state.settings.token
    if not token:
        return
    given = credentials.credentials if credentials is not None else ""
    # Constant-time: the comparison must not reveal how much of a guess was right.
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise StarletteHTTPException(
            401,
            "this call changes state and needs the service's token: send "
            "'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
