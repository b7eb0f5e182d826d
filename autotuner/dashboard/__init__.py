"""The dashboard: studies, their trials, and the evidence behind the recommendation.

Server-rendered HTML (Jinja2) with the page's data embedded as JSON and drawn by Chart.js
(vendored under static/, MIT licence), so it works on a cluster with no internet access. Each
page also answers `?format=json` with the same data, which the page polls to redraw as trials
land. The JSON shapes are `autotuner.study.views`', shared with the API and the CLI.

Mount with `app.include_router(dashboard.router)` and `app.mount("/static", dashboard.static)`;
the app must set `app.state.db` to an `autotuner.storage.session.Database`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from autotuner.dashboard.charts import knob_effects, pareto_front
from autotuner.storage.repository import StudyNotFound, StudyRepo, TrialRepo
from autotuner.study.views import best_view, study_view, trial_view

_HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(_HERE / "templates"))
static = StaticFiles(directory=str(_HERE / "static"))
router = APIRouter(include_in_schema=False)


def _db(request: Request) -> Any:
    return request.app.state.db


def _respond(request: Request, template: str, data: dict[str, Any]) -> Response:
    if request.query_params.get("format") == "json":
        return JSONResponse(data)
    return templates.TemplateResponse(request, template, {"data": data})


@router.get("/", response_class=HTMLResponse)
def studies_page(request: Request) -> Response:
    with _db(request).session() as s:
        studies = StudyRepo(s).list(limit=200)
        rows = [study_view(st, TrialRepo(s).list(st.id)) for st in studies]
    return _respond(request, "studies.html", {"studies": rows})


@router.get("/studies/{study_id}", response_class=HTMLResponse)
def study_page(request: Request, study_id: str) -> Response:
    with _db(request).session() as s:
        try:
            study = StudyRepo(s).require(study_id)
        except StudyNotFound as exc:
            raise HTTPException(404, str(exc)) from None
        trials = TrialRepo(s).list(study.id)
        views = [trial_view(t) for t in trials]
        data = {
            "study": study_view(study, trials),
            "best": best_view(study, trials)["best"],
            "trials": views,
            "knobs": list((study.space or {}).get("knobs", {})),
            "effects": knob_effects(views),
            "pareto": pareto_front(views),
        }
    return _respond(request, "study.html", data)


@router.get("/studies/{study_id}/trials/{number}", response_class=HTMLResponse)
def trial_page(request: Request, study_id: str, number: int) -> Response:
    with _db(request).session() as s:
        try:
            study = StudyRepo(s).require(study_id)
        except StudyNotFound as exc:
            raise HTTPException(404, str(exc)) from None
        trial = TrialRepo(s).get(study.id, number)
        if trial is None:
            raise HTTPException(404, f"study {study.id} has no trial #{number}")
        data = {
            "study_id": study.id,
            "study_name": study.name,
            "trial": trial_view(trial, full=True),
        }
    return _respond(request, "trial.html", data)
