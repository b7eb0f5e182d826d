"""The JSON API under /api, plus /healthz. Bodies are the `autotuner.study.views` shapes, typed
by the response models in `autotuner.api.schemas` (so /openapi.json documents them).

Handlers are plain functions (FastAPI runs them in its thread pool): each is one call into
`autotuner.study.operations`, the same code the CLI runs on a local database.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from fastapi.responses import PlainTextResponse

from autotuner.api.deps import require_token
from autotuner.api.schemas import BestView, Health, SpaceInfo, StudyView, TrialDetail, TrialView
from autotuner.spec import ModelFamily
from autotuner.storage.models import StudyStatus
from autotuner.study import cancel, trial_reads
from autotuner.study import operations as studies
from autotuner.study.export import FORMATS as EXPORT_FORMATS
from autotuner.study.export import FORMATS_TABLE
from autotuner.study.request import StudyRequest
from autotuner.study.study_query import MAX_TEXT, StudyQuery

# Bodies are validated against their response models and written with only the keys the view
# set (`exclude_unset`): the JSON is the view's, nulls included (see autotuner.api.schemas).
router = APIRouter(prefix="/api")
health = APIRouter()

StudyRef = Annotated[
    str,
    Path(
        min_length=1,
        max_length=200,
        description="A study id, a unique prefix of one, or a study name.",
    ),
]
_MEDIA = {name: fmt.media for name, fmt in FORMATS_TABLE.items()}
_STUDY_ERRORS: dict[int | str, dict[str, Any]] = {404: {"description": "No such study"}}
_AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "The service has a token and the call did not send it"},
    413: {"description": "Body over the size limit"},
    422: {"description": "Invalid input; `detail` says what to fix"},
}


def _db(request: Request) -> Any:
    return request.app.state.db


def _json(views: list[dict[str, Any]]) -> Response:
    """A list of views as JSON, as it is: the lists are long (200 studies; a page of 500
    trials, which `trial_page_json` encodes the same way) and FastAPI's response-model encoding
    of every item cost 3x the query. The views are the models' shapes already
    (tests/service/test_api_schema.py checks them against the models). Encoded by orjson: a
    page of 500 trials (400 kB) in 0.4 ms of CPU, where json took 7."""
    return Response(orjson.dumps(views), media_type="application/json")


def _wake(request: Request) -> None:
    scheduler = request.app.state.scheduler
    if scheduler is not None:
        scheduler.wake()


# --------------------------------------------------------------------------- studies


@router.post(
    "/studies",
    status_code=201,
    response_model=StudyView,
    response_model_exclude_unset=True,
    dependencies=[Depends(require_token)],
    responses={
        **_AUTH_ERRORS,
        200: {"description": "The study an earlier request with this Idempotency-Key created"},
    },
    summary="Submit a study",
)
def submit_study(
    body: StudyRequest,
    request: Request,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="A fresh value per study (e.g. a UUID), sent again on each retry of "
            "the same request: a retry whose first try was recorded gets that study back "
            "(200, `Idempotent-Replayed: true`) instead of a second one; the same key with a "
            "different body is 422. `autotuner submit` sends one.",
        ),
    ] = None,
) -> dict[str, Any]:
    """Validate and queue a study; the coordinator starts it as soon as GPUs are free."""
    scheduler = request.app.state.scheduler
    target = scheduler.target() if scheduler is not None else None
    settings = request.app.state.settings  # the operator's --data-dir and --factory-dir
    view, created = studies.submit_once(
        _db(request),
        body,
        target,
        data_access=settings.data_access,
        factory_access=settings.factory_access,
        key=idempotency_key,
    )
    if not created:
        response.status_code = 200
        response.headers["Idempotent-Replayed"] = "true"
    _wake(request)
    return view


@router.get(
    "/studies",
    response_model=list[StudyView],
    response_model_exclude_unset=True,
    summary="List studies, newest first",
)
def list_studies(
    request: Request,
    status: Annotated[StudyStatus | None, Query(description="Only studies in this status")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    q: Annotated[
        str | None,
        Query(max_length=MAX_TEXT, description="Text in the name or the model's name, any case"),
    ] = None,
    family: Annotated[ModelFamily | None, Query(description="Only this model family")] = None,
    device: Annotated[
        Literal["cuda", "cpu"] | None, Query(description="Only studies whose trials run on it")
    ] = None,
) -> Any:
    query = StudyQuery(
        text=(q or "").strip(), family=family.value if family else None, device=device
    )
    found = studies.list_studies(
        _db(request), status=status.value if status else None, limit=limit, query=query
    )
    return _json(found)


@router.get(
    "/studies/{study}",
    response_model=StudyView,
    response_model_exclude_unset=True,
    responses=_STUDY_ERRORS,
    summary="One study's progress",
)
def get_study(study: StudyRef, request: Request) -> dict[str, Any]:
    return studies.get_study(_db(request), study)


@router.get(
    "/studies/{study}/trials",
    response_model=list[TrialView],
    response_model_exclude_unset=True,
    responses={
        **_STUDY_ERRORS,
        200: {
            "description": "A page of trials; where more follow, a `Link: <...>; "
            'rel="next"` header (and `X-Next-After`) gives the next page',
        },
    },
    summary="A study's trials, a page at a time",
)
def list_trials(
    study: StudyRef,
    request: Request,
    after: Annotated[
        int | None,
        Query(ge=-1, description="Only trials numbered above this (the last one you have)"),
    ] = None,
    limit: Annotated[
        int | None,
        Query(
            ge=1,
            le=10_000,
            description=f"At most this many (default {trial_reads.PAGE_SIZE})",
        ),
    ] = None,
) -> Any:
    """In number order, a page at a time (`limit`, default 500): where more trials follow, the
    `Link` header's `rel="next"` URL (and `X-Next-After`, the `after` to send) gives the next
    page. Poll for new trials with `after` (the last number you have)."""
    page, next_after = trial_reads.trial_page(_db(request), study, after=after, limit=limit)
    response = Response(page, media_type="application/json")
    if next_after is not None:
        size = limit or trial_reads.PAGE_SIZE
        url = request.url.include_query_params(after=next_after, limit=size)
        response.headers["Link"] = f'<{url.path}?{url.query}>; rel="next"'
        response.headers["X-Next-After"] = str(next_after)
    return response


@router.get(
    "/studies/{study}/trials/{number}",
    response_model=TrialDetail,
    response_model_exclude_unset=True,
    responses=_STUDY_ERRORS,
    summary="One trial with its full config and result",
)
def get_trial(
    study: StudyRef, number: Annotated[int, Path(ge=0, le=10_000_000)], request: Request
) -> dict[str, Any]:
    return trial_reads.get_trial(_db(request), study, number)


@router.get(
    "/studies/{study}/best",
    response_model=BestView,
    response_model_exclude_unset=True,
    responses=_STUDY_ERRORS,
    summary="The best trial so far",
)
def get_best(
    study: StudyRef,
    request: Request,
    headroom: Annotated[
        float | None,
        Query(
            ge=0,
            le=0.9,
            description="Re-judge the measured trials at this memory headroom instead of the "
            "study's (0.05: keep 5% free); nothing is stored",
        ),
    ] = None,
) -> dict[str, Any]:
    return studies.get_best(_db(request), study, headroom=headroom)


@router.post(
    "/studies/{study}/cancel",
    response_model=StudyView,
    response_model_exclude_unset=True,
    dependencies=[Depends(require_token)],
    responses={**_STUDY_ERRORS, **_AUTH_ERRORS, 409: {"description": "Already finished"}},
    summary="Cancel a queued or running study",
)
def cancel_study(study: StudyRef, request: Request) -> dict[str, Any]:
    view = cancel.cancel_study(_db(request), study)
    _wake(request)
    return view


@router.post(
    "/studies/{study}/resume",
    response_model=StudyView,
    response_model_exclude_unset=True,
    dependencies=[Depends(require_token)],
    responses={**_STUDY_ERRORS, **_AUTH_ERRORS, 409: {"description": "Not interrupted"}},
    summary="Resume an interrupted study where it stopped",
)
def resume_study(study: StudyRef, request: Request) -> dict[str, Any]:
    """Queue an interrupted study (Ctrl-C or SIGTERM of `tune`, a service's drain) again: this
    service's coordinator runs it on with its trials, budget left and seeds. A service never
    runs an interrupted study unless asked so."""
    from autotuner.study.resume import resume_study as resume

    view = resume(_db(request), study)
    _wake(request)
    return view


@router.get(
    "/studies/{study}/export",
    responses={
        200: {
            "description": "The config as text, in the media type of its format",
            "content": {media: {"schema": {"type": "string"}} for media in _MEDIA.values()},
        },
        **_STUDY_ERRORS,
        409: {"description": "The study was cancelled or failed: pass allow_partial=true"},
        422: {"description": "No completed trial yet, or bad format"},
    },
    response_class=PlainTextResponse,
    summary="The best config for a trainer (hf, lightning, torchtitan, accelerate, pytorch), "
    "its process environment: NCCL, CUDA allocator (env), the record (json, yaml) or a script "
    "re-running it (torchrun)",
)
def export_best(
    study: StudyRef,
    request: Request,
    format: Annotated[str, Query(pattern="^(" + "|".join(EXPORT_FORMATS) + ")$")] = "json",
    allow_partial: Annotated[
        bool, Query(description="Export a cancelled or failed study's best so far")
    ] = False,
) -> PlainTextResponse:
    text = studies.export_best(_db(request), study, format, allow_partial=allow_partial)
    return PlainTextResponse(text, media_type=_MEDIA[format])


@router.get(
    "/spaces",
    response_model=list[SpaceInfo],
    response_model_exclude_unset=True,
    summary="The built-in search spaces",
)
def list_spaces() -> list[dict[str, Any]]:
    from autotuner.search.space import builtin_space_names, load_space, spaces_dir

    out = []
    for name in builtin_space_names():
        space = load_space(str(spaces_dir() / f"{name}.yaml"))
        out.append({"name": name, "description": space.description, "size": space.size()})
    return out


# --------------------------------------------------------------------------- health


@health.get(
    "/healthz",
    response_model=Health,
    response_model_exclude_unset=True,
    responses={503: {"model": Health, "description": "The database or the coordinator is down"}},
    summary="Liveness and readiness: the database and the coordinator",
)
def healthz(request: Request, response: Response) -> dict[str, Any]:
    db = request.app.state.db
    scheduler = request.app.state.scheduler
    try:
        db.check()
        database = "ok"
    except Exception:
        database = "unavailable"
    coordinator = scheduler.status() if scheduler is not None else {"state": "off"}
    # Unhealthy when the database does not answer or the coordinator thread died or its last
    # round failed: an orchestrator restarts a service that would otherwise run no study.
    ok = database == "ok" and coordinator.get("healthy", True)
    response.status_code = 200 if ok else 503
    return {
        "status": "ok" if ok else "degraded",
        "database": database,
        "coordinator": coordinator,
        "version": request.app.version,
    }
