"""The FastAPI application: settings, edge checks (body size, token), error mapping, lifespan.

    autotuner serve --db postgresql+psycopg://... [--ray-address ...]

One process serves the JSON API under /api and runs the coordinator (`Scheduler`) in a
background thread. Errors a client can fix are 4xx with a `detail` that says what to fix; a
database outage is 503 (retry); nothing a client sends can make the service write half a study.
"""

from __future__ import annotations

import gc
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.middleware.gzip import GZipMiddleware

from autotuner.api.deps import MAX_BODY_BYTES, BodySizeLimit
from autotuner.api.security import SecurityHeaders, TokenGate
from autotuner.inputs import UserError
from autotuner.storage.common import StudyNotFound
from autotuner.storage.session import Database, redact, upgrade_database
from autotuner.study.coordinator_claim import CoordinatorClaim, new_instance
from autotuner.study.data_access import DataAccess
from autotuner.study.factory_access import FactoryAccess
from autotuner.study.operations import Conflict, NotFound

log = logging.getLogger("autotuner.service")
GZIP_MIN_BYTES = 1_000


@dataclass(frozen=True)
class ServiceSettings:
    """How `autotuner serve` was started. The token comes from $AUTOTUNER_TOKEN only."""

    db_url: str
    token: str | None = None
    public_reads: bool = False  # reads need no token (the operator opted in: --public-reads)
    executor: str = "ray"  # or replay:FILE (see autotuner.executors.factory)
    ray_address: str | None = None
    owner: str | None = None  # the coordinator's lease owner id; default serve@host:port
    port: int = 8000
    coordinator: bool = True
    migrate: bool = True
    max_body_bytes: int = MAX_BODY_BYTES
    lease_ttl_s: float = 60.0
    heartbeat_interval_s: float = 5.0
    poll_s: float = 0.5
    # Where a request's `data` may be read (serve --data-dir / $AUTOTUNER_DATA_DIRS); by
    # default nowhere: the service must not read its own files for whoever holds the token.
    data_access: DataAccess = field(default_factory=DataAccess.nowhere)
    # Where a factory model's code may come from (serve --factory-dir / $AUTOTUNER_FACTORY_DIRS);
    # by default nowhere: a factory is code the workers run for whoever holds the token.
    factory_access: FactoryAccess = field(default_factory=FactoryAccess.nowhere)
    # This process's claim on its coordinator id (study/coordinator_claim.py): `serve` takes it
    # before listening, so a clash is one line; the app takes it again (a renewal) if not.
    instance: str = field(default_factory=new_instance)

    @property
    def coordinator_id(self) -> str:
        # Stable across restarts of the same service (same host and port), so a restarted
        # service takes its studies back at once instead of waiting for its old leases to
        # expire. Two live services with one id (the flag given twice, or one host name on
        # two machines) are refused by the claim (study/coordinator_claim.py).
        return (self.owner or f"serve@{socket.gethostname()}:{self.port}")[:64]

    def claim(self, db: Database) -> CoordinatorClaim:
        """This process's claim on its coordinator id, renewed for as long as a lease lasts."""
        return CoordinatorClaim(db, self.coordinator_id, self.lease_ttl_s, instance=self.instance)


# --------------------------------------------------------------------------- errors


def _validation_detail(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "json_invalid":
            msg = f"malformed JSON ({err.get('ctx', {}).get('error', 'syntax error')})"
            loc = []
        elif err.get("type") == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling"
        elif err.get("type") == "missing":
            msg = "missing; it is required"
        parts.append(f"{'.'.join(loc)}: {msg}" if loc else msg)
    return "; ".join(parts)


def _install_error_handlers(app: FastAPI) -> None:
    from autotuner.study.scheduler import DB_ERRORS

    def detail(status: int, message: str) -> JSONResponse:
        return JSONResponse({"detail": message}, status_code=status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return detail(422, _validation_detail(exc))

    # Errors that carry their own remedy: the message goes to the client as it is.
    remedy_errors = ((Conflict, 409), (UserError, 422), (StudyNotFound, 404), (NotFound, 404))
    for error_type, status in remedy_errors:

        async def _remedy(request: Request, exc: Exception, status: int = status) -> JSONResponse:
            return detail(status, str(exc))

        app.add_exception_handler(error_type, _remedy)

    async def _db_down(request: Request, exc: Exception) -> JSONResponse:
        # The driver's message names host and user: log it, don't send it.
        log.warning(
            "database unavailable during %s %s: %s",
            request.method,
            request.url.path,
            str(exc).splitlines()[0][:200],
        )
        return JSONResponse(
            {"detail": "the database is unavailable; retry in a few seconds"},
            status_code=503,
            headers={"Retry-After": "5"},
        )

    for error in DB_ERRORS:
        app.add_exception_handler(error, _db_down)

    @app.exception_handler(RecursionError)
    async def _too_deep(request: Request, exc: RecursionError) -> JSONResponse:
        return detail(400, "the request body is nested too deeply; flatten it")


# --------------------------------------------------------------------------- the app


def create_app(settings: ServiceSettings) -> FastAPI:
    """The API with its coordinator; both start and stop with the app's lifespan."""
    from autotuner.api.routes import health, router

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = Database(settings.db_url)
        db.check()
        if settings.migrate:
            upgrade_database(db.url)
        app.state.db = db
        scheduler = None
        claim = None
        if settings.coordinator:
            claim = settings.claim(db)
            claim.take()  # before any study is adopted: a clash must not touch one
            claim.keep(settings.heartbeat_interval_s)
            from autotuner.executors.factory import build_executor
            from autotuner.study.scheduler import Scheduler

            scheduler = Scheduler(
                db,
                lambda: build_executor(settings.executor, ray_address=settings.ray_address),
                owner=settings.coordinator_id,
                poll_s=settings.poll_s,
                lease_ttl_s=settings.lease_ttl_s,
                heartbeat_interval_s=settings.heartbeat_interval_s,
            )
            scheduler.start()
        app.state.scheduler = scheduler
        # What startup built (the modules, SQLAlchemy's mappings, the app) lives as long as the
        # process: frozen out of the cyclic collector's reach, a full collection no longer walks
        # it (it paused a request 50 to 200 ms every few dozen of the 200-study list).
        gc.freeze()
        log.info(
            "serving; database %s, executor %s, coordinator %s, user data %s, model code %s, "
            "token %s",
            redact(db.url),
            settings.executor,
            settings.coordinator_id if scheduler else "off",
            settings.data_access.describe(),
            settings.factory_access.describe(),
            (
                ("required for changes; reads are public" if settings.public_reads else "required")
                if settings.token
                else "NOT SET (anyone may submit)"
            ),
        )
        try:
            yield
        finally:
            if scheduler is not None:
                scheduler.stop()  # gives the leases back and shuts down a Ray it started
            if claim is not None:
                claim.release()
            log.info("stopped%s", "; its studies resume on the next start" if scheduler else "")

    app = FastAPI(
        title="autotuner",
        version=_version(),
        summary="Finds the fastest way to train an LLM on given GPUs with measured trials.",
        lifespan=lifespan,
        # /docs and /redoc are ours (autotuner.api.docs): FastAPI's load their assets from a CDN.
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.scheduler = None
    # Outermost last: the headers go on every response, the token is checked before the body
    # is read (a stranger gets 401, never a 422 describing the API), then the size limit.
    # Innermost: responses are compressed before the headers are added (a trial page of 500
    # is ~400 kB of JSON: level 1 makes it 71 kB in 1.8 ms of CPU, level 5 59 kB in 4.3 ms;
    # on a local network the time counts, not 12 kB). Small bodies are sent as they are.
    app.add_middleware(GZipMiddleware, minimum_size=GZIP_MIN_BYTES, compresslevel=1)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(TokenGate, token=settings.token, public_reads=settings.public_reads)
    app.add_middleware(SecurityHeaders)
    _install_error_handlers(app)
    app.include_router(router)
    app.include_router(health)
    from autotuner.api import docs

    app.include_router(docs.router)  # before /static: its assets live under /static/apidocs
    from autotuner import dashboard  # HTML pages at / over the same database

    app.include_router(dashboard.router)
    app.mount("/static", dashboard.static, name="static")
    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("autotuner")
    except PackageNotFoundError:
        return "0"
