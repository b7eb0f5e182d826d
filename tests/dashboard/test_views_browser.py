"""The dashboard's views driven in a real headless Chromium (tests/browser.py): a header click
sorts the trials table, the filter bar filters it and the download link carries the filters;
the per-knob strip plots mark failures; two studies ticked on the list open the compare page;
the trial page draws its telemetry over time and the models' predictions.

The studies are replayed through the real coordinator; the replayed results carry NVML-shaped
telemetry samples (a fake GPU's, as tests/fakes.py fakes the rest of it)."""

from __future__ import annotations

import csv
import io
import itertools
import math
from collections.abc import Iterator
from typing import Any

import pytest

from autotuner.executors.replay import Landscape, ReplayExecutor
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec, Telemetry, TelemetrySeries, TrialResult
from autotuner.storage.session import Database
from autotuner.study import operations, trial_reads
from autotuner.study.coordinator import StudyRunner, create_study
from tests.browser import Browser
from tests.dashboard.conftest import KNOBS, make_app
from tests.dashboard.test_dashboard_browser import _serve
from tests.fakes import synthetic_landscape

pytestmark = pytest.mark.browser
SAMPLES = 60  # 6 s of the measured repeats at telemetry_hz 10


def _with_telemetry(result: TrialResult) -> TrialResult:
    """`result` with the samples NVML gives over 6 s of steps: busy with a dip between steps,
    power and clock following, memory flat at the step's peak."""
    if not result.tokens_per_s:
        return result
    t = [i / 10 for i in range(SAMPLES)]
    util = [97.0 if i % 12 else 60.0 for i in range(SAMPLES)]
    power = [380.0 + 3 * u + 15 * math.sin(i / 5) for i, u in enumerate(util)]
    series = TelemetrySeries(
        t_s=t,
        sm_util_pct=util,
        power_w=power,
        sm_clock_mhz=[1980.0 if u > 90 else 1755.0 for u in util],
        mem_used_gib=[(result.peak_mem_gib or 0) + 0.6] * SAMPLES,
    )
    telemetry = Telemetry(
        samples=SAMPLES,
        sm_util_mean_pct=sum(util) / SAMPLES,
        power_mean_w=sum(power) / SAMPLES,
        sm_clock_mean_mhz=1950.0,
        sm_clock_max_mhz=1980.0,
        temperature_max_c=61.0,
        throttle_reasons=["SwPowerCap"],
        series=series,
    )
    return result.model_copy(update={"telemetry": telemetry})


def _replayed(db: Database, knobs: dict[str, list[object]], name: str, trials: int) -> str:
    landscape = synthetic_landscape(knobs)
    landscape = Landscape([(p, _with_telemetry(r)) for p, r in landscape.entries])
    study_id = create_study(
        db,
        model=ModelSpec.resolve({"preset": "tiny"}),
        space=parse_space({"name": name, "knobs": knobs}),
        max_trials=trials,
        name=name,
    )
    StudyRunner(db, study_id, ReplayExecutor(landscape, list(knobs)), poll_s=0).run()
    return study_id


@pytest.fixture
def served(sqlite_url: str) -> Iterator[tuple[Database, str, str, str]]:
    """The base URL, a 12-trial study with failures, and a smaller fp32-only one."""
    db = Database(sqlite_url)
    big = _replayed(db, KNOBS, "mixed", 12)
    small = _replayed(db, {"micro_batch_size": [8, 16, 32], "precision": ["fp32"]}, "fp32", 4)
    for base in _serve(make_app(db)):
        yield db, base, big, small


ROWS = "[...document.querySelectorAll('#trials tbody tr')].map(r => Number(r.dataset.number))"


def _view_drawn(b: Browser, view: str) -> None:
    b.wait_for(f"document.body.dataset.tableView === {view!r}")


def _expected(db: Database, study_id: str, query: list[tuple[str, str]]) -> list[int]:
    page = trial_reads.query_trials(db, study_id, query, limit=100)
    return [t["number"] for t in page["trials"]]


def _page_errors(b: Browser) -> list[str]:
    """What the page reported: uncaught errors, console and CSP errors, failed loads."""
    return list(b.errors)


def test_headers_sort_and_the_filter_bar_filters(served: tuple[Database, str, str, str]) -> None:
    db, base, study_id, _ = served
    with Browser() as b:
        b.open(f"{base}/studies/{study_id}", ready="document.body.dataset.tableView")
        newest_first = _expected(db, study_id, [("order", "desc")])
        assert b.eval(ROWS) == newest_first
        b.click("#trials th[data-sort=tokens_per_s]")
        _view_drawn(b, "sort=tokens_per_s&order=desc&page=0")
        by_speed = _expected(db, study_id, [("sort", "tokens_per_s"), ("order", "desc")])
        assert b.eval(ROWS) == by_speed
        assert b.eval("location.search") == "?sort=tokens_per_s&order=desc"  # a link keeps it
        assert b.eval("document.querySelector('th.sorted').dataset.sort") == "tokens_per_s"
        b.click("#trials th[data-sort=tokens_per_s]")  # again: the other way
        _view_drawn(b, "sort=tokens_per_s&order=asc&page=0")
        assert b.eval(ROWS) == _expected(db, study_id, [("sort", "tokens_per_s")])

        b.select("#filters select[name=state]", "infeasible")
        _view_drawn(b, "sort=tokens_per_s&order=asc&state=infeasible&page=0")
        failed = _expected(db, study_id, [("state", "infeasible"), ("sort", "tokens_per_s")])
        assert failed and b.eval(ROWS) == failed
        states = b.eval(
            "[...document.querySelectorAll('#trials tbody .state')].map(e => e.textContent)"
        )
        assert set(states) == {"infeasible"}
        assert "matching" in b.eval("document.getElementById('pager-text').textContent")
        # The download is the filtered table, as CSV.
        text = b.eval("fetch(document.getElementById('download-csv').href).then(r => r.text())")
        table = list(csv.DictReader(io.StringIO(text)))
        assert [int(r["number"]) for r in table] == failed
        assert {r["state"] for r in table} == {"infeasible"}

        # The failure class filters too, and the JSON download is the same filtered table.
        b.select("#filters select[name=error_class]", "oom")
        _view_drawn(b, "sort=tokens_per_s&order=asc&state=infeasible&error_class=oom&page=0")
        query = [("state", "infeasible"), ("error_class", "oom"), ("sort", "tokens_per_s")]
        ooms = _expected(db, study_id, query)
        assert ooms and b.eval(ROWS) == ooms
        rows = b.eval("fetch(document.getElementById('download-json').href).then(r => r.json())")
        assert [r["number"] for r in rows] == ooms
        assert {r["error_class"] for r in rows} == {"oom"}
        b.select("#filters select[name=error_class]", "")
        _view_drawn(b, "sort=tokens_per_s&order=asc&state=infeasible&page=0")

        b.select("#filters select[name=micro_batch_size]", "8")  # nothing at 8 fails
        _view_drawn(b, "sort=tokens_per_s&order=asc&state=infeasible&micro_batch_size=8&page=0")
        assert b.eval(ROWS) == []
        assert "no trial matches" in b.eval("document.getElementById('pager-text').textContent")
        b.click("#filters button[type=reset]")
        _view_drawn(b, "sort=tokens_per_s&order=asc&page=0")
        assert _page_errors(b) == []

        # A link with a sort and filters opens on that view, its filter bar set.
        b.open(
            f"{base}/studies/{study_id}?state=complete&precision=bf16&sort=peak_mem_gib&order=asc",
            ready="document.body.dataset.tableView",
        )
        _view_drawn(b, "sort=peak_mem_gib&order=asc&state=complete&precision=bf16&page=0")
        query = [("state", "complete"), ("precision", "bf16"), ("sort", "peak_mem_gib")]
        assert b.eval(ROWS) == _expected(db, study_id, query)
        assert b.eval("document.querySelector('#filters [name=state]').value") == "complete"
        assert _page_errors(b) == []


# Each strip's tick labels as drawn: centre and width (the widest of its lines) in pixels.
_STRIP_LABELS = """(() => {
  const out = {};
  for (const canvas of document.querySelectorAll('canvas[id^=effect-]')) {
    const c = Chart.getChart(canvas), s = c.scales.x;
    c.ctx.save(); c.ctx.font = Chart.helpers.toFont(s.options.ticks.font).string;
    out[canvas.id] = s.ticks.map((t, i) => ({
      label: t.label, x: s.getPixelForTick(i),
      w: Math.max(...[].concat(t.label).map(line => c.ctx.measureText(line).width)),
    }));
    c.ctx.restore();
  }
  return out;
})()"""


def strip_label_overlaps(b: Browser) -> list[tuple[str, Any, Any]]:
    """The pairs of neighbouring value labels on the page's strip plots that run into each
    other, as (canvas id, left label, right label); asserts there are strips to look at."""
    strips = b.eval(_STRIP_LABELS)
    assert strips and all(len(ticks) >= 2 for ticks in strips.values()), strips
    return [
        (canvas, left["label"], right["label"])
        for canvas, ticks in strips.items()
        for left, right in itertools.pairwise(ticks)
        if left["x"] + left["w"] / 2 >= right["x"] - right["w"] / 2
    ]


def test_strip_plots_show_every_measured_trial_and_mark_failures(
    served: tuple[Database, str, str, str],
) -> None:
    db, base, study_id, _ = served
    trials = trial_reads.list_trials(db, study_id)
    with Browser() as b:
        b.open(f"{base}/studies/{study_id}", ready="document.body.dataset.charts === '4'")
        counts = b.eval(
            "(() => { const c = Chart.getChart(document.getElementById('effect-micro_batch_size'));"
            " return c.data.datasets.map(d => d.data.length); })()"
        )
        failed_at = b.eval(
            "Chart.getChart(document.getElementById('effect-micro_batch_size'))"
            ".data.datasets[2].data.map(d => d.n)"
        )
        overlaps = strip_label_overlaps(b)
        assert _page_errors(b) == []
    assert overlaps == []
    ok = [t for t in trials if t["state"] == "complete"]
    failed = [t for t in trials if t["state"] == "infeasible"]
    assert counts[0] == len(ok)  # every measured trial is a dot (few trials: no sampling)
    assert counts[1] == len({t["params"]["micro_batch_size"] for t in ok})  # a median each
    assert sum(failed_at) == len(failed) > 0


def test_two_ticked_studies_open_the_compare_page(
    served: tuple[Database, str, str, str],
) -> None:
    db, base, big, small = served
    with Browser() as b:
        b.open(f"{base}/", ready="document.getElementById('compare-button') !== null")
        assert b.eval("document.getElementById('compare-button').disabled") is True
        b.click(f"input[name=pick][value={big}]")
        b.click(f"input[name=pick][value={small}]")
        assert b.eval("document.getElementById('compare-button').disabled") is False
        b.click("#compare-button")
        b.wait_for("document.body.dataset.compared")
        assert b.eval("location.pathname + location.search") in (
            f"/compare?a={big}&b={small}",
            f"/compare?a={small}&b={big}",
        )
        a_is_big = b.eval("location.search").startswith(f"?a={big}")
        best = {ref: operations.get_best(db, ref)["best"]["tokens_per_s"] for ref in (big, small)}
        shown_a = b.eval("document.getElementById('best-a').textContent")
        shown_b = b.eval("document.getElementById('best-b').textContent")
        first, second = (big, small) if a_is_big else (small, big)
        assert shown_a == f"{round(best[first]):,}" and shown_b == f"{round(best[second]):,}"
        # Knobs whose recommended values differ are marked.
        assert b.eval("document.querySelector('tr.differs[data-knob=precision]') !== null")
        datasets = b.eval(
            "Chart.getChart(document.getElementById('chart-compare')).data.datasets.length"
        )
        assert datasets == 4  # each study's trials and best so far
        assert _page_errors(b) == []
        b.open(f"{base}/compare?a={big}&b=st-nope")
        assert "st-nope" in b.eval("document.getElementById('not-found').textContent")


def test_trial_page_draws_telemetry_and_predictions(
    served: tuple[Database, str, str, str],
) -> None:
    db, base, study_id, _ = served
    rec = operations.get_best(db, study_id)["best"]
    number = rec["cost_model"]["trials"][0]["trial_number"]
    with Browser() as b:
        page = f"{base}/studies/{study_id}/trials/{number}"
        b.open(page, ready="document.body.dataset.trialCharts")
        assert b.eval("document.body.dataset.trialCharts") == "6"  # 4 telemetry + 2 predicted
        lengths = b.eval(
            "['chart-sm', 'chart-power', 'chart-clock', 'chart-memory']"
            ".map(id => Chart.getChart(document.getElementById(id)).data.datasets[0].data.length)"
        )
        assert lengths == [SAMPLES] * 4
        assert "SwPowerCap" in b.eval("document.getElementById('throttle').textContent")
        assert _page_errors(b) == []


# --------------------------------------------------------------------------- the studies list

STUDY_ROWS = "[...document.querySelectorAll('#studies tbody tr')].map(r => r.dataset.id).sort()"
LLAMA = {
    "family": "llama",
    "n_layer": 2,
    "d_model": 128,
    "n_head": 2,
    "vocab_size": 512,
    "seq_len": 64,
}


def _listed(db: Database, name: str, model: dict[str, object], device: str, status: str) -> str:
    from autotuner.storage.models import StudyStatus
    from autotuner.storage.study_repo import StudyRepo

    study_id = create_study(
        db,
        model=ModelSpec.resolve(model),
        space=parse_space({"name": "list", "knobs": KNOBS}),
        name=name,
        max_trials=8,
        device_type=device,
    )
    with db.session() as s:
        repo = StudyRepo(s)
        repo.set_status(repo.require(study_id), StudyStatus(status))
    return study_id


def _list_drawn(b: Browser, search: str) -> list[str]:
    b.wait_for(f"document.body.dataset.studiesView === {search!r}")
    return list(b.eval(STUDY_ROWS))


def test_the_studies_list_filters_on_the_server_and_keeps_them_live(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    ids = {
        "llama-run": _listed(db, "llama width", LLAMA, "cuda", "running"),
        "llama-done": _listed(db, "llama depth", LLAMA, "cuda", "completed"),
        "gpt-run": _listed(db, "gpt2 sweep", {"preset": "gpt2-124m"}, "cuda", "running"),
        "cpu-done": _listed(db, "laptop demo", {"preset": "tiny"}, "cpu", "completed"),
    }
    for base in _serve(make_app(db)):
        with Browser() as b:
            b.open(f"{base}/", ready="document.body.dataset.studiesView !== undefined")
            assert b.eval(STUDY_ROWS) == sorted(ids.values())
            b.select("#study-filters select[name=status]", "running")
            running = _list_drawn(b, "?status=running")
            assert running == sorted([ids["llama-run"], ids["gpt-run"]])
            assert b.eval("location.search") == "?status=running"  # a bookmark keeps it
            # Typing searches once the typing pauses (the name or the model, any case).
            b.eval(
                "(() => { const q = document.querySelector('#study-filters [name=q]');"
                " q.value = 'LLAMA'; q.dispatchEvent(new Event('input')); })()"
            )
            assert _list_drawn(b, "?q=LLAMA&status=running") == [ids["llama-run"]]
            b.select("#study-filters select[name=device]", "cpu")
            assert _list_drawn(b, "?q=LLAMA&status=running&device=cpu") == []
            assert "No studies match" in b.eval("document.getElementById('no-match').textContent")
            b.select("#study-filters select[name=device]", "")
            _list_drawn(b, "?q=LLAMA&status=running")

            # The live refresh (every 5 s) redraws the same filtered view: a new matching
            # study appears, one that does not match stays out, the filters stay on.
            new_llama = _listed(db, "llama again", LLAMA, "cuda", "running")
            _listed(db, "gpt2 again", {"preset": "gpt2-124m"}, "cuda", "running")
            b.wait_for(f"document.querySelector('tr[data-id={new_llama}]') !== null", 12)
            assert b.eval(STUDY_ROWS) == sorted([ids["llama-run"], new_llama])
            assert b.eval("location.search") == "?q=LLAMA&status=running"
            assert b.eval("document.querySelector('#study-filters [name=q]').value") == "LLAMA"

            b.click("#clear-filters")
            assert len(_list_drawn(b, "")) == 6
            assert _page_errors(b) == []

            # A bookmarked filtered address opens on that view, its filter bar set.
            ready = "document.body.dataset.studiesView"
            b.open(f"{base}/?family=llama&status=completed", ready=ready)
            assert b.eval(STUDY_ROWS) == [ids["llama-done"]]
            assert b.eval("document.querySelector('#study-filters [name=family]').value") == "llama"
            assert b.eval("document.querySelector('#study-filters [name=status]').value") == (
                "completed"
            )
            assert b.eval("document.getElementById('clear-filters').hidden") is False
            # A bad value in a hand-edited address: the page says what is allowed.
            b.open(f"{base}/?device=tpu", ready=ready)
            error = b.eval("document.getElementById('filter-error').textContent")
            assert "choose one of cuda, cpu" in error
            errors = _page_errors(b)
            assert all("400" in e for e in errors), errors  # only the page's own status


def test_a_long_knob_verdict_wraps_inside_its_card(served: tuple[Database, str, str, str]) -> None:
    """A knob's verdict is a sentence; the allocator's "memory only: ..." ran past the card's
    right edge, clipped, when the table's cells did not wrap (seen in a screenshot)."""
    from autotuner.storage.study_repo import StudyRepo

    db, base, big, _ = served
    sentence = "memory only: it changes what is reserved, not the speed; " * 6
    with db.session() as s:
        study = StudyRepo(s).require(big)
        assert study.recommendation is not None
        study.recommendation = {
            **study.recommendation,
            "importance": [{"knob": "allocator", "text": sentence.strip()}],
        }
    with Browser(width=1000, height=900) as b:
        b.open(f"{base}/studies/{big}", ready="document.getElementById('importance') !== null")
        table = "document.getElementById('importance')"
        widths = b.eval(f"[{table}.scrollWidth, {table}.parentElement.clientWidth]")
        assert widths[0] <= widths[1], widths
        assert _page_errors(b) == []
