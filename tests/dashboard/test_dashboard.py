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


def test_unknown_study_and_trial_are_404_pages(study: tuple[Database, str]) -> None:
    """Issue 42: an unknown study id showed the raw JSON `{"detail": ...}` in the browser. It
    is the dashboard's 404 page, saying what was not found, with a link to every study; a
    script (`format=json`) still gets the JSON."""
    db, study_id = study
    client = TestClient(make_app(db))
    for path, said in (
        ("/studies/st-nope", "no study with id, id prefix or name &#39;st-nope&#39;"),
        (f"/studies/{study_id}/trials/999", f"study {study_id} has no trial #999"),
    ):
        page = client.get(path)
        assert page.status_code == 404
        assert page.headers["content-type"].startswith("text/html"), page.text
        assert '<p id="not-found">' in page.text and said in page.text, page.text
        assert 'href="/">All studies</a>' in page.text
        as_json = client.get(path, params={"format": "json"})
        assert as_json.status_code == 404 and "detail" in as_json.json()


def test_static_chart_library_is_served(study: tuple[Database, str]) -> None:
    db, _ = study
    client = TestClient(make_app(db))
    js = client.get("/static/chart.umd.min.js")
    assert js.status_code == 200 and "Chart.js v4" in js.text[:200]


def test_one_number_for_the_best_on_the_study_page_and_the_list(
    study: tuple[Database, str],
) -> None:
    """Issue 42: a first measurement that the re-measurements revised down kept the chart's
    best-so-far line at the first value while the headline and the card said the pooled one.
    The line, the card, the headline's value and the studies list now read one number."""
    from sqlalchemy import update

    from autotuner.search.objective import Objective
    from autotuner.storage.models import Study, StudyStatus, TrialState
    from autotuner.storage.trial_repo import TrialRepo
    from autotuner.study import operations
    from autotuner.study.live import store_live_best
    from tests.fakes import measured

    db, study_id = study
    with db.session() as s:  # the replayed study, as if it were still running
        s.execute(
            update(Study).where(Study.id == study_id).values(status=StudyStatus.RUNNING.value)
        )
    first = operations.get_best(db, study_id)["best"]
    assert first is not None
    lower = first["tokens_per_s"] * 0.8
    with db.session() as s:  # fresh processes measure the winner 20% below, outvoting the first
        trials = TrialRepo(s)
        for _ in range(first["measurements"] + 1):
            row = trials.create_running(
                study_id, params=first["params"], config={}, purpose="remeasure"
            )
            trials.finish(row, TrialState.COMPLETE, result=measured(lower), objective_value=lower)
    store_live_best(db, study_id, Objective.TOKENS_PER_S)
    client = TestClient(make_app(db))
    data = client.get(f"/studies/{study_id}?format=json").json()
    line = data["charts"]["progress"]["best"]
    headline = data["study"]["recommended_value"]
    assert line[-1][1] == data["best"]["tokens_per_s"] == headline
    assert headline < first["tokens_per_s"]
    # The line rose to the first measurement and stepped down where the re-measurements
    # outvoted it (a step of the line's own, not an end point added to match).
    steps = [v for _, v in line]
    assert first["tokens_per_s"] in steps and steps.index(headline) > steps.index(
        first["tokens_per_s"]
    )
    listed = client.get("/?format=json").json()["studies"][0]
    assert listed["recommended_value"] == headline


def test_the_list_never_swaps_the_recommendation_for_the_fastest_trial(
    study: tuple[Database, str],
) -> None:
    """Issue 42: the studies list's best moved while one watched. It showed the fastest single
    trial (`best_value`) wherever a running study had no stored recommendation (before the
    first one is written, or after a trial that left none recommendable) and the
    recommendation's pooled value otherwise. A running study now shows only the latter; one
    that ended with nothing recommendable shows its fastest, said so."""
    from sqlalchemy import update

    from autotuner.storage.models import Study, StudyStatus

    db, study_id = study
    client = TestClient(make_app(db))

    def cell() -> str:
        match = re.search(r'<td class="num best-value"[^>]*>(.*?)</td>', client.get("/").text)
        assert match
        return match.group(1)

    fastest = client.get("/?format=json").json()["studies"][0]["best_value"]
    for status, shown in (
        (StudyStatus.RUNNING, "–"),
        (StudyStatus.COMPLETED, f"{fastest:,.0f} <small>none recommendable</small>"),
    ):
        with db.session() as s:
            s.execute(
                update(Study)
                .where(Study.id == study_id)
                .values(status=status.value, recommendation=None)
            )
        assert cell() == shown


def test_the_best_so_far_line_ranks_configs_as_the_recommendation_does() -> None:
    """Each config's measurements pooled (their median), re-measured configs ahead of a single
    unrepeated measurement (study/recommend.py `_ranked`), end checks and tight trials left
    out; the line ends on the recommendation's value where that differs."""
    from autotuner.dashboard.charts import progress_series

    def row(number: int, config: str, tps: float, purpose: str = "search", **kw: object):
        return {
            "number": number,
            "state": "complete",
            "tokens_per_s": tps,
            "purpose": purpose,
            "params": {"precision": config},
            "candidate": True,
            **kw,
        }

    rows = [
        row(0, "a", 1000.0),
        row(1, "b", 950.0),
        row(2, "c", 1200.0, candidate=False),  # tight: a point, never the line
        row(3, "a", 880.0, "remeasure"),  # a pooled: 940, re-measured, ahead of b's 950
        row(4, "a", 2000.0, "headroom"),  # an end check: not a measurement of a candidate
        row(5, "a", 890.0, "remeasure"),  # a pooled: 890
    ]
    progress = progress_series(rows)
    assert progress["best"] == [[0, 1000.0], [3, 940.0], [5, 890.0]]
    assert [p[1] for p in progress["points"]] == [1000.0, 950.0, 1200.0, 880.0, 2000.0, 890.0]
    # A recommendation elsewhere (b, say, after a's numerics check failed): the line ends on it.
    assert progress_series(rows, final=950.0)["best"][-1] == [5, 950.0]
