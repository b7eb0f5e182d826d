"""The dashboard renders real studies from the database: lists, charts' data, trial detail."""

from __future__ import annotations

import json
import re

from fastapi.testclient import TestClient

from autotuner.storage.session import Database
from tests.dashboard.conftest import make_app


def _embedded(html: str) -> dict:
    match = re.search(r'<script id="page-data" type="application/json">(.*?)</script>', html, re.S)
    assert match, "the page embeds its data"
    return json.loads(match.group(1))


def test_studies_page_lists_the_study(study: tuple[Database, str]) -> None:
    db, study_id = study
    client = TestClient(make_app(db))
    page = client.get("/")
    assert page.status_code == 200
    assert f'href="/studies/{study_id}"' in page.text  # a path: no Host header in links
    assert _embedded(page.text)["studies"][0]["status"] == "completed"


def test_study_page_has_every_trial_and_chart_data(study: tuple[Database, str]) -> None:
    db, study_id = study
    client = TestClient(make_app(db))
    page = client.get(f"/studies/{study_id}")
    assert page.status_code == 200
    data = _embedded(page.text)
    assert len(data["trials"]) == data["study"]["trials_total"] >= 10  # under one page
    charts = data["charts"]
    assert {"micro_batch_size", "precision"} == set(charts["strips"])
    # The synthetic landscape OOMs above 32 (fp32) / 64 (bf16): those values show failures.
    assert any(cell["failed"] for cell in charts["strips"]["micro_batch_size"]["cells"])
    ok = [t for t in data["trials"] if t["state"] == "complete"]
    front = {number for _, _, number in charts["pareto"]["front"]}
    assert max(t["tokens_per_s"] for t in ok if t["number"] in front) == max(
        t["tokens_per_s"] for t in ok
    )
    assert data["best"]["trial_number"] in front
    # Few trials: every measured one is drawn, and the best-so-far line ends at the best.
    assert charts["progress"]["shown"] == charts["progress"]["measured"] == len(ok)
    assert charts["progress"]["best"][-1][1] == max(t["tokens_per_s"] for t in ok)
    commands = re.search(r'<pre id="export-commands">(.*?)</pre>', page.text, re.S)
    assert commands, "the recommendation shows how to export it"
    assert f"autotuner export {study_id} -f hf  # " in commands.group(1)
    as_json = client.get(f"/studies/{study_id}?format=json").json()
    assert as_json["study"]["id"] == study_id and len(as_json["trials"]) == len(data["trials"])


def test_a_poll_gets_newer_trials_and_charts_only_when_more_finished(
    study: tuple[Database, str],
) -> None:
    db, study_id = study
    client = TestClient(make_app(db))
    first = client.get(f"/studies/{study_id}?format=json").json()
    total, finished = first["study"]["trials_total"], first["charts_at"]
    poll = client.get(f"/studies/{study_id}?format=json&after={total - 3}&charts_at={finished}")
    assert [t["number"] for t in poll.json()["trials"]] == [total - 2, total - 1]
    assert "charts" not in poll.json()  # nothing finished since: no chart data resent
    stale = client.get(f"/studies/{study_id}?format=json&after={total - 1}&charts_at=0").json()
    assert stale["trials"] == [] and stale["charts"]["progress"]["measured"] > 0
    rows = client.get(f"/studies/{study_id}/trial-rows?after=2&limit=3").json()
    assert [t["number"] for t in rows] == [3, 4, 5]


def test_trial_page_shows_config_result_and_error(study: tuple[Database, str]) -> None:
    db, study_id = study
    client = TestClient(make_app(db))
    data = client.get(f"/studies/{study_id}?format=json").json()
    failed = next(t for t in data["trials"] if t["state"] == "infeasible")
    page = client.get(f"/studies/{study_id}/trials/{failed['number']}")
    assert page.status_code == 200 and 'id="error"' in page.text and "oom" in page.text
    ok = next(t for t in data["trials"] if t["state"] == "complete")
    page = client.get(f"/studies/{study_id}/trials/{ok['number']}")
    assert 'id="config"' in page.text and "FakeGpu H200" in page.text


def test_unknown_study_and_trial_are_404(study: tuple[Database, str]) -> None:
    db, study_id = study
    client = TestClient(make_app(db))
    assert client.get("/studies/st-nope").status_code == 404
    assert client.get(f"/studies/{study_id}/trials/999").status_code == 404


def test_static_chart_library_is_served(study: tuple[Database, str]) -> None:
    db, _ = study
    client = TestClient(make_app(db))
    js = client.get("/static/chart.umd.min.js")
    assert js.status_code == 200 and "Chart.js v4" in js.text[:200]
