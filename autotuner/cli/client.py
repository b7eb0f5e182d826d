"""Two backends with one interface, so each CLI verb has one code path and one renderer:

- `ServiceClient`: the autotuner service over HTTP (`--server URL` / $AUTOTUNER_SERVER), sending
  $AUTOTUNER_TOKEN as a bearer token;
- `LocalClient`: a database opened directly (`--db URL` / $AUTOTUNER_DATABASE_URL / the
  embedded SQLite file), through the same `autotuner.study.operations` functions the service runs.

Both return the `autotuner.study.views` JSON shapes.
"""

from __future__ import annotations

import os
from typing import Any, Protocol
from urllib.parse import quote

from autotuner.errors import UserError

SERVER_ENV = "AUTOTUNER_SERVER"
TOKEN_ENV = "AUTOTUNER_TOKEN"
# A submit is tried this often while the service answers 503 or the reply is lost: 1, 2, 4
# and 5 s of waits (Retry-After caps them), past a database failover's few seconds.
SUBMIT_TRIES = 5


def _retry_wait(attempt: int, retry_after: str | None) -> float:
    """Seconds before the next try: the service's Retry-After, but no longer than 1, 2, 4, 8 s
    for the 1st, 2nd... retry (a short outage is over sooner than the service can know)."""
    cap = float(2**attempt)
    try:
        return min(float(retry_after), cap) if retry_after else cap
    except ValueError:
        return cap


class ServiceError(UserError):
    """The service refused a request, or could not be reached; the message says why."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Backend(Protocol):
    def submit(self, body: dict[str, Any]) -> dict[str, Any]: ...
    def studies(self, status: str | None = None, limit: int = 50) -> list[dict[str, Any]]: ...
    def study(self, ref: str) -> dict[str, Any]: ...
    def trials(
        self, ref: str, after: int | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]: ...
    def trial(self, ref: str, number: int) -> dict[str, Any]: ...
    def last_trials(
        self, ref: str, last: int | None
    ) -> tuple[dict[str, Any], int, list[dict[str, Any]]]: ...
    def best(self, ref: str, headroom: float | None = None) -> dict[str, Any]: ...
    def cancel(self, ref: str) -> dict[str, Any]: ...
    def export(self, ref: str, fmt: str, allow_partial: bool = False) -> str: ...


def connect(server: str | None, db: str | None) -> Backend:
    """The service if a server URL is given (flag or env), else the local database."""
    if server and server.strip():
        return ServiceClient(server.strip(), token=os.environ.get(TOKEN_ENV) or None)
    return LocalClient(db)


class ServiceClient:
    """The service's JSON API."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout_s: float = 30.0):
        import httpx

        if "://" not in base_url:
            base_url = f"http://{base_url}"
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        if response.status_code >= 400:
            raise ServiceError(_detail(response), response.status_code)
        return response

    def _unreachable(self, exc: Exception) -> ServiceError:
        return ServiceError(
            f"cannot reach the autotuner service at {self.base_url} ({type(exc).__name__}: "
            f"{exc}); is `autotuner serve` running there? set --server or {SERVER_ENV}"
        )

    def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST the study, retried while the service says "retry" (503) or the reply is lost,
        with one Idempotency-Key for every try: a try whose study was recorded (its reply
        lost) is answered with that study on the next, never a second study."""
        import time
        import uuid

        import httpx

        key = {"Idempotency-Key": str(uuid.uuid4())}
        reached = False
        for attempt in range(SUBMIT_TRIES):
            last = attempt == SUBMIT_TRIES - 1
            try:
                response = self._http.post("/api/studies", json=body, headers=key)
            except httpx.TransportError as exc:
                # Never reached (a wrong URL, no service): say so now, not after the retries.
                if last or (isinstance(exc, httpx.ConnectError) and not reached):
                    raise self._unreachable(exc) from None
                time.sleep(_retry_wait(attempt, None))
                continue
            reached = True
            if response.status_code == 503 and not last:
                time.sleep(_retry_wait(attempt, response.headers.get("Retry-After")))
                continue
            break
        if response.status_code >= 400:
            raise ServiceError(_detail(response), response.status_code)
        return response.json()

    def studies(self, status: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit}
        if status:
            params["status"] = status
        return self._call("GET", "/api/studies", params=params).json()

    def study(self, ref: str) -> dict[str, Any]:
        return self._call("GET", f"/api/studies/{self._id(ref)}").json()

    def trials(
        self, ref: str, after: int | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """The trials numbered above `after`, at most `limit` (None: all of them): the
        service answers a page at a time, and its `Link: rel="next"` header is followed
        until the trials run out or `limit` are read."""
        page = {k: v for k, v in (("after", after), ("limit", limit)) if v is not None}
        query = ("?" + "&".join(f"{k}={v}" for k, v in page.items())) if page else ""
        path: str | None = f"/api/studies/{self._id(ref)}/trials{query}"
        out: list[dict[str, Any]] = []
        while path is not None and (limit is None or len(out) < limit):
            response = self._call("GET", path)
            out += response.json()
            path = response.links.get("next", {}).get("url")
        return out if limit is None else out[:limit]

    def trial(self, ref: str, number: int) -> dict[str, Any]:
        return self._call("GET", f"/api/studies/{self._id(ref)}/trials/{number}").json()

    def last_trials(
        self, ref: str, last: int | None
    ) -> tuple[dict[str, Any], int, list[dict[str, Any]]]:
        """The study's view, its number of trials and its `last` newest trials (None: all)."""
        from autotuner.study.newest import after_last

        view = self.study(ref)
        total = sum(view.get("trial_counts", {}).values())
        return view, total, self.trials(view["id"], after=after_last(total, last))

    def best(self, ref: str, headroom: float | None = None) -> dict[str, Any]:
        params = {} if headroom is None else {"headroom": headroom}
        return self._call("GET", f"/api/studies/{self._id(ref)}/best", params=params).json()

    def cancel(self, ref: str) -> dict[str, Any]:
        return self._call("POST", f"/api/studies/{self._id(ref)}/cancel").json()

    def resume(self, ref: str) -> dict[str, Any]:
        """Queue an interrupted study again; the service runs it (`autotuner resume`)."""
        return self._call("POST", f"/api/studies/{self._id(ref)}/resume").json()

    def export(self, ref: str, fmt: str, allow_partial: bool = False) -> str:
        path = f"/api/studies/{self._id(ref)}/export"
        params: dict[str, Any] = {"format": fmt}
        if allow_partial:
            params["allow_partial"] = "true"
        return self._call("GET", path, params=params).text

    def _id(self, ref: str) -> str:
        """The ref as a path segment; a study name containing '/' is looked up by name."""
        ref = ref.strip()
        if "/" not in ref:
            return _ref(ref)
        for view in self.studies(limit=1000):  # newest first, like the database's lookup
            if view["name"] == ref:
                return _ref(view["id"])
        raise ServiceError(
            f"no study with id, id prefix or name {ref!r}; run `autotuner status` to list studies"
        )

    def health(self) -> dict[str, Any]:
        import httpx

        try:
            return self._http.get("/healthz").json()
        except (httpx.TransportError, ValueError) as exc:
            raise ServiceError(f"cannot reach {self.base_url}: {exc}") from None


def _ref(ref: str) -> str:
    # A '/' cannot travel in a path segment (servers decode %2F before routing); names with
    # one are resolved to an id first (ServiceClient._id).
    return quote(ref.strip(), safe="")


def _detail(response: Any) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, list):  # FastAPI's default shape, from an older service
        detail = "; ".join(str(d.get("msg", d)) for d in detail)
    text = detail or response.text[:300] or response.reason_phrase
    if response.status_code == 401:
        text += f"; the CLI sends ${TOKEN_ENV}: set it to the service's token"
    return f"{text} [HTTP {response.status_code}]"


class LocalClient:
    """A database opened in this process."""

    def __init__(self, db_url: str | None) -> None:
        from autotuner.storage.session import Database, resolve_database_url

        self.db = Database(resolve_database_url(db_url))
        self._schema_checked = False

    @property
    def _readable(self) -> Any:
        """The database, once checked to exist at this version's schema (readers only)."""
        if not self._schema_checked:
            self.db.check_schema()
            self._schema_checked = True
        return self.db

    def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        from pydantic import ValidationError

        from autotuner.inputs import describe_validation_error
        from autotuner.storage.session import upgrade_database
        from autotuner.study import operations as studies
        from autotuner.study.request import StudyRequest

        try:
            request = StudyRequest.model_validate(body)
        except ValidationError as exc:
            raise UserError(describe_validation_error(exc)) from None
        self.db.check()
        upgrade_database(self.db.url)
        from autotuner.study.data_access import DataAccess
        from autotuner.study.factory_access import FactoryAccess

        # A database opened here, as the user: the same trust as `tune` (the service's
        # directories bound only what it reads and runs for others).
        return studies.submit_study(
            self.db,
            request,
            data_access=DataAccess.anywhere(),
            factory_access=FactoryAccess.anywhere(),
        )

    def studies(self, status: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        from autotuner.study import operations as studies

        return studies.list_studies(self._readable, status=status, limit=limit)

    def study(self, ref: str) -> dict[str, Any]:
        from autotuner.study import operations as studies

        return studies.get_study(self._readable, ref)

    def trials(
        self, ref: str, after: int | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        from autotuner.study import trial_reads

        return trial_reads.list_trials(self._readable, ref, after=after, limit=limit)

    def trial(self, ref: str, number: int) -> dict[str, Any]:
        from autotuner.study import trial_reads

        return trial_reads.get_trial(self._readable, ref, number)

    def last_trials(
        self, ref: str, last: int | None
    ) -> tuple[dict[str, Any], int, list[dict[str, Any]]]:
        from autotuner.study import trial_reads

        return trial_reads.last_trials(self._readable, ref, last)

    def best(self, ref: str, headroom: float | None = None) -> dict[str, Any]:
        from autotuner.study import operations as studies

        return studies.get_best(self._readable, ref, headroom=headroom)

    def cancel(self, ref: str) -> dict[str, Any]:
        from autotuner.study import cancel

        return cancel.cancel_study(self._readable, ref)

    def export(self, ref: str, fmt: str, allow_partial: bool = False) -> str:
        from autotuner.study import operations as studies

        return studies.export_best(self._readable, ref, fmt, allow_partial=allow_partial)
