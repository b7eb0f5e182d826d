"""The dashboard: studies, their trials, and the evidence behind the recommendation.

Server-rendered HTML (Jinja2) with the page's data embedded as JSON and drawn by Chart.js
(vendored under static/, MIT licence), so it works on a cluster with no internet access. Each
page also answers `?format=json` with the same data, which the page polls to redraw as trials
land. Pages read through `autotuner.study.operations`, the functions the API and the CLI call,
so the dashboard runs the same queries and shows the same `autotuner.study.views` shapes.

Mount with `app.include_router(dashboard.router)` and `app.mount("/static", dashboard.static)`;
the app must set `app.state.db` to an `autotuner.storage.session.Database`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from jinja2 import pass_context

from autotuner import numbers
from autotuner.api.security import (
    COOKIE,
    login_form_token,
    safe_next,
    session_value,
    token_matches,
)
from autotuner.dashboard.charts import ended_line
from autotuner.dashboard.charts_kept import study_charts
from autotuner.storage.common import StudyNotFound
from autotuner.study import operations, trial_reads
from autotuner.study.export import export_commands
from autotuner.study.labels import (
    PURPOSE_TAGS,
    budget_used,
    model_label,
    no_recommendation_note,
    runs_on,
    trial_label,
    unfinished_note,
)
from autotuner.study.operations import NotFound
from autotuner.study.study_query import DEVICES, FAMILIES, STATUSES, parse_study_query
from autotuner.study.trial_list import NOT_MEASUREMENTS
from autotuner.study.trial_query import ERROR_CLASSES, STATES, InvalidQuery
from autotuner.study.trials_csv import trials_csv

_HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(_HERE / "templates"))


def _path(request: Request, name: str, /, **params: Any) -> str:
    # A path, not Starlette's absolute URL: that one is built from the request's Host (and, behind
    # a proxy, X-Forwarded-*) headers, which a client controls, and would land in <script src>.
    return request.scope.get("root_path", "") + str(request.app.url_path_for(name, **params))


@pass_context
def _url_path(context: dict[str, Any], name: str, /, **params: Any) -> str:
    return _path(context["request"], name, **params)


templates.env.globals["url_for"] = _url_path
templates.env.globals["trial_label"] = trial_label  # `cancelled`, not a bare `failed`
templates.env.globals.update(model_label=model_label, runs_on=runs_on, budget_used=budget_used)
templates.env.globals["export_commands"] = export_commands  # the same lines `best` prints
# Numbers as people read them (autotuner.numbers): 17,884 and 0.227 s, never 17884.0389 or None.
templates.env.filters.update(
    num=numbers.number,
    secs=numbers.seconds,
    gib=numbers.gib,
    loss=numbers.loss,
    when=numbers.timestamp,
)
templates.env.globals.update(duration_between=numbers.duration_between, plural=numbers.plural)
static = StaticFiles(directory=str(_HERE / "static"))
router = APIRouter(include_in_schema=False)
PAGE_SIZE = 100  # trials per page of the study page's table
_PAGING = ("after", "offset", "limit", "format")  # query parameters that are not filters


def _db(request: Request) -> Any:
    return request.app.state.db


def _respond(
    request: Request, template: str, data: dict[str, Any], status_code: int = 200
) -> Response:
    if request.query_params.get("format") == "json":
        return JSONResponse(data, status_code=status_code)
    return templates.TemplateResponse(request, template, {"data": data}, status_code=status_code)


STUDIES_SHOWN = 200  # the newest studies the list shows (after its filters)


@router.get("/", response_class=HTMLResponse)
def studies_page(request: Request) -> Response:
    """The studies list, newest first. Filtered on the server by `status` (comma-separated for
    several), `q` (text in the name or model), `family` and `device`, kept in the address so a
    filtered view can be bookmarked; a bad filter is a 400 that lists the allowed values."""
    choices = {"statuses": STATUSES, "families": FAMILIES, "devices": DEVICES}
    try:
        query = parse_study_query(request.query_params.multi_items(), ignore=("format",))
    except InvalidQuery as exc:
        if request.query_params.get("format") == "json":
            return JSONResponse({"detail": str(exc)}, status_code=400)
        # The page with its filter bar, cleared, and what was wrong: one click fixes it.
        page: dict[str, Any] = {"studies": [], "filters": choices, "query": {}}
        page.update(error=str(exc), limit=STUDIES_SHOWN)
        return _respond(request, "studies.html", page, status_code=400)
    studies = operations.list_studies(_db(request), limit=STUDIES_SHOWN, query=query)
    data: dict[str, Any] = {"studies": studies, "filters": choices, "query": query.params()}
    data["limit"] = STUDIES_SHOWN
    return _respond(request, "studies.html", data)


@router.get("/studies/{study_id}", response_class=HTMLResponse)
def study_page(
    request: Request,
    study_id: str,
    after: Annotated[int | None, Query(ge=-1)] = None,
    charts_at: Annotated[int | None, Query(ge=0)] = None,
) -> Response:
    """The study page; `?format=json` is its data. A poll sends `after` (the trials above that
    number: new ones and those still running when last seen) and `charts_at` (how many
    finished trials its charts show): the charts come back only when more have finished."""
    try:
        detail = trial_reads.get_study_detail(
            _db(request),
            study_id,
            after=after,
            last=PAGE_SIZE,
            charts_at=charts_at,
            charts=study_charts,
        )
    except StudyNotFound as exc:
        return _not_found(request, f"{exc}.")
    data = {
        "study": detail["study"],
        "best": detail["best"]["best"],
        # For a cancelled or failed study: how far it got (None otherwise; study/labels.py).
        # With no best at all, `no_recommendation` says why (a failed study's reason once).
        "unfinished": unfinished_note(detail["best"]) if detail["best"]["best"] else None,
        # Nothing to recommend (yet): why, and what to do, in the CLI's words.
        "no_recommendation": (
            no_recommendation_note(detail["best"]) if detail["best"]["best"] is None else None
        ),
        "trials": detail["trials"],
        "knobs": detail["knobs"],
        "page_size": PAGE_SIZE,
    }
    if after is None:  # the page itself (a poll has them): what the table's filters offer
        data["filters"] = {
            "states": STATES,
            "error_classes": ERROR_CLASSES,
            "knobs": detail["knob_domains"],
        }
        # The trials whose tokens/s is no throughput (a numerics check's parity runs).
        data["not_measurements"] = sorted(NOT_MEASUREMENTS)
        data["purpose_tags"] = PURPOSE_TAGS  # what a re-measurement or end check is tagged
    if detail["charts"] is not None:
        # The line ends on the number the headline and the card show (charts.progress_series).
        # The charts are kept per study (charts_kept.py): the page's copy is its own.
        best = detail["best"]["best"]
        final = best and best.get("tokens_per_s")
        data["charts"] = {
            **detail["charts"],
            "progress": ended_line(detail["charts"]["progress"], final),
        }
        data["charts_at"] = detail["study"]["trials_finished"]
    return _respond(request, "study.html", data)


@router.get("/studies/{study_id}/trial-rows")
def trial_rows(
    request: Request,
    study_id: str,
    after: Annotated[int | None, Query(ge=-1)] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = PAGE_SIZE,
) -> Response:
    """A page of the trials table. With `after`: the trials numbered above it, at most `limit`
    (keyset paging in number order). Otherwise `limit` trials from `offset`, sorted and
    filtered by `sort`, `order`, `state`, `error_class` and `<knob>=<value>` (a bad one: 400,
    with the allowed values); the X-Total-Count header says how many match in all."""
    params = [(k, v) for k, v in request.query_params.multi_items() if k not in _PAGING]
    try:
        if after is not None and not params:
            body = trial_reads.trial_page_json(_db(request), study_id, after=after, limit=limit)
            return Response(body, media_type="application/json")
        page = trial_reads.query_trials(_db(request), study_id, params, offset=offset, limit=limit)
    except StudyNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except InvalidQuery as exc:
        raise HTTPException(400, str(exc)) from None
    return JSONResponse(page["trials"], headers={"X-Total-Count": str(page["total"])})


@router.get("/studies/{study_id}/trials.{fmt}")
def trials_download(request: Request, study_id: str, fmt: str) -> Response:
    """Every trial the query selects (the trials-rows filters and order), as a CSV or JSON
    file named after the study."""
    if fmt not in ("csv", "json"):
        raise HTTPException(404, f"trials.{fmt}: download trials.csv or trials.json")
    params = [(k, v) for k, v in request.query_params.multi_items() if k not in _PAGING]
    try:
        page = trial_reads.query_trials(_db(request), study_id, params)
    except StudyNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except InvalidQuery as exc:
        raise HTTPException(400, str(exc)) from None
    filename = f"{_safe_name(study_id)}-trials.{fmt}"
    headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
    if fmt == "json":
        return JSONResponse(page["trials"], headers=headers)
    text = trials_csv(page["trials"], page["knobs"])
    return Response(text, media_type="text/csv", headers=headers)


def _safe_name(text: str) -> str:
    """`text` with only the characters a filename header may carry unquoted."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    a: str | None = None,
    b: str | None = None,
    pick: Annotated[list[str] | None, Query()] = None,
) -> Response:
    """Two studies side by side: their recommendations, best tokens/s, trial counts and one
    chart of both throughputs over trials. `pick` (the studies list's two ticks) redirects to
    the `a`/`b` address; a missing or unknown study is a 404 page that says which."""
    if pick:
        if len(pick) != 2:
            return _not_found(request, f"Tick exactly two studies to compare ({len(pick)} ticked).")
        target = f"{_path(request, 'compare_page')}?a={quote(pick[0])}&b={quote(pick[1])}"
        return RedirectResponse(target, 303)
    if not a or not b:
        return _not_found(
            request,
            "Name two studies to compare: /compare?a=ID&b=ID (or tick two on the studies list).",
        )
    sides = {}
    for key, ref in (("a", a), ("b", b)):
        try:
            detail = trial_reads.get_study_detail(_db(request), ref, last=0, charts=study_charts)
        except StudyNotFound as exc:
            return _not_found(request, f"Study {key}: {exc}")
        sides[key] = {
            "study": detail["study"],
            "best": detail["best"]["best"],
            "knobs": detail["knobs"],
            "progress": ended_line(detail["charts"]["progress"], None),
        }
    return _respond(request, "compare.html", sides)


def _not_found(request: Request, message: str) -> Response:
    """A 404 a person can act on: the page says what was missing (JSON for `format=json`)."""
    if request.query_params.get("format") == "json":
        return JSONResponse({"detail": message}, status_code=404)
    return templates.TemplateResponse(
        request, "not_found.html", {"data": {}, "message": message}, status_code=404
    )


@router.get("/studies/{study_id}/trials/{number}", response_class=HTMLResponse)
def trial_page(request: Request, study_id: str, number: int) -> Response:
    try:
        data = trial_reads.get_trial_detail(_db(request), study_id, number)
    except (StudyNotFound, NotFound) as exc:
        return _not_found(request, f"{exc}.")
    return _respond(request, "trial.html", data)


# --------------------------------------------------------------------------- signing in


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> Response:
    """A form for the service's token; a browser then holds a read-only session cookie."""
    return templates.TemplateResponse(
        request, "login.html", {"next": safe_next(request.query_params.get("next")), "error": ""}
    )


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    settings = getattr(request.app.state, "settings", None)
    token: str | None = settings.token if settings is not None else None
    target = safe_next(request.query_params.get("next"))
    given = login_form_token(await request.body())
    if token and not token_matches(given, token):
        context = {"next": target, "error": "That is not the service's token."}
        return templates.TemplateResponse(request, "login.html", context, status_code=401)
    response = RedirectResponse(target, status_code=303)
    if token:
        response.set_cookie(
            COOKIE,
            session_value(token),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
    return response
