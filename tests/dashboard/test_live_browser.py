"""The dashboard following a running study in a real headless Chromium (tests/browser.py), and
how its pages format what they show (issue 11, items 4 and 7).

Live: trials finish while the page is open (written as the coordinator writes them: the trial
row, then the live recommendation) and the study page's charts, and the studies list's row of
that study, redraw from their polls without a reload. Format: trial-number axes tick at whole
numbers only, and a pruned trial's reason is drawn grey, not as a red error.

The studies are small on purpose: with two trials (numbers 0 and 1) Chart.js would tick the
trial axis at 0.1 steps unless told not to, so the integer-tick test can fail."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from autotuner.search.objective import Objective
from autotuner.search.space import parse_space
from autotuner.spec import FailureClass, ModelSpec, TrialResult
from autotuner.storage.models import StudyStatus, TrialState
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import create_study
from autotuner.study.live import store_live_best
from tests.browser import Browser
from tests.dashboard.conftest import KNOBS, make_app
from tests.dashboard.test_dashboard_browser import _serve
from tests.dashboard.test_views_browser import _page_errors
from tests.fakes import measured

pytestmark = pytest.mark.browser
MAX_TRIALS = 8
LIVE_S = 30  # a bound on a hang: the pages poll every 5 s


def _running_study(db: Database, name: str) -> str:
    study_id = create_study(
        db,
        model=ModelSpec.resolve({"preset": "tiny"}),
        space=parse_space({"name": name, "knobs": KNOBS}),
        max_trials=MAX_TRIALS,
        name=name,
    )
    with db.session() as s:
        repo = StudyRepo(s)
        repo.set_status(repo.require(study_id), StudyStatus.RUNNING)
    return study_id


def _finish(db: Database, study_id: str, tps: float, micro_batch_size: int) -> int:
    """A measured trial, recorded as the coordinator records one (the row, then the live
    recommendation); its number. Peak memory grows with the micro-batch, so no two trials share
    a cell of the throughput/memory chart's grid: each one is drawn there."""
    params = {"micro_batch_size": micro_batch_size, "precision": "bf16"}
    with db.session() as s:
        trials = TrialRepo(s)
        row = trials.create_running(study_id, params=params, config={})
        result = measured(tps, peak_mem_gib=micro_batch_size / 4)
        trials.finish(row, TrialState.COMPLETE, result=result, objective_value=tps)
        number = row.number
    store_live_best(db, study_id, Objective.TOKENS_PER_S)
    return number


@pytest.fixture
def live(sqlite_url: str) -> Iterator[tuple[Database, str, str]]:
    """The base URL and a running study of two measured trials (#0 at 1,000 tokens/s, #1 at
    2,000) out of a budget of MAX_TRIALS."""
    db = Database(sqlite_url)
    study_id = _running_study(db, "live")
    _finish(db, study_id, 1000, 8)
    _finish(db, study_id, 2000, 16)
    for base in _serve(make_app(db)):
        yield db, base, study_id


def _chart(canvas_id: str) -> str:
    return f"Chart.getChart(document.getElementById({json.dumps(canvas_id)}))"


# The points each chart has drawn (its dataset's elements after the last update, not only the
# data handed to it): the progress scatter, the Pareto scatter (front and the rest) and the
# micro_batch_size strip plot's dots.
DRAWN = f"""({{
  progress: {_chart("chart-progress")}.getDatasetMeta(0).data.length,
  pareto: {_chart("chart-pareto")}.getDatasetMeta(0).data.length
        + {_chart("chart-pareto")}.getDatasetMeta(1).data.length,
  strip: {_chart("effect-micro_batch_size")}.getDatasetMeta(0).data.length,
}})"""
CHARTS_READY = "document.body.dataset.charts === '4'"  # progress, Pareto, one strip per knob


def test_the_study_page_charts_redraw_as_trials_finish(live: tuple[Database, str, str]) -> None:
    db, base, study_id = live
    with Browser() as b:
        b.open(f"{base}/studies/{study_id}", ready=CHARTS_READY)
        assert b.eval(DRAWN) == {"progress": 2, "pareto": 2, "strip": 2}
        new = [_finish(db, study_id, 3000, 32), _finish(db, study_id, 2500, 64)]
        b.wait_for(f"{DRAWN}.progress === 4", LIVE_S)
        assert b.eval(DRAWN) == {"progress": 4, "pareto": 4, "strip": 4}
        xs = b.eval(f"{_chart('chart-progress')}.data.datasets[0].data.map(p => p.x)")
        assert sorted(xs) == [0, 1, *new]
        # The best-so-far line steps up to the new best and runs on to the newest trial.
        line = b.eval(f"{_chart('chart-progress')}.data.datasets[1].data")
        assert line[-2:] == [{"x": new[0], "y": 3000}, {"x": new[1], "y": 3000}]
        assert b.eval("document.body.dataset.charts") == "4"  # redrawn in place, none added
        assert _page_errors(b) == []


# The running study's row on the list, cell by cell under its column's header.
def _row(study_id: str) -> str:
    return f"""(() => {{
  const heads = [...document.querySelectorAll('#studies thead th')].map(th => th.textContent);
  const row = document.querySelector('#studies tr[data-id={json.dumps(study_id)}]');
  const cell = (name) => row.cells[heads.indexOf(name)].textContent.trim();
  return {{ best: cell('best tokens/s'), number: cell('best #'), progress: cell('progress'),
            bar: row.querySelector('progress').value, trials: cell('trials') }};
}})()"""


def test_a_running_study_row_on_the_list_follows_its_trials(
    live: tuple[Database, str, str],
) -> None:
    db, base, study_id = live
    row = _row(study_id)
    with Browser() as b:
        b.open(f"{base}/", ready="document.body.dataset.studiesView !== undefined")
        assert b.eval(row) == {
            "best": "2,000",
            "number": "1",
            "progress": f"2/{MAX_TRIALS}",
            "bar": 2 / MAX_TRIALS,
            "trials": "2 complete",
        }
        number = _finish(db, study_id, 3000, 32)
        b.wait_for(f"{row}.best === '3,000'", LIVE_S)
        assert b.eval(row) == {
            "best": "3,000",
            "number": str(number),
            "progress": f"3/{MAX_TRIALS}",
            "bar": 3 / MAX_TRIALS,
            "trials": "3 complete",
        }
        assert _page_errors(b) == []


def _x_ticks(canvas_id: str) -> str:
    return f"{_chart(canvas_id)}.scales.x.ticks.map(t => t.value)"


def test_trial_number_axes_tick_at_whole_numbers(live: tuple[Database, str, str]) -> None:
    db, base, study_id = live
    other = _running_study(db, "other")
    _finish(db, other, 1500, 8)
    _finish(db, other, 1800, 16)
    with Browser() as b:
        b.open(f"{base}/studies/{study_id}", ready=CHARTS_READY)
        ticks = b.eval(_x_ticks("chart-progress"))
        # Two or more ticks, else "no fractional tick" says nothing.
        assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks
        b.open(f"{base}/compare?a={study_id}&b={other}", ready="document.body.dataset.compared")
        ticks = b.eval(_x_ticks("chart-compare"))
        assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks
        assert _page_errors(b) == []


# A colour as the page computes it: `color` is a CSS value (a variable of dashboard.css).
def _computed(color: str) -> str:
    return f"""(() => {{
  const probe = document.createElement('span');
  probe.style.color = {json.dumps(color)};
  document.body.append(probe);
  const value = getComputedStyle(probe).color;
  probe.remove();
  return value;
}})()"""


def _reason_cell(number: int) -> str:
    return f"""(() => {{
  const td = document.querySelector('#trials tr[data-number="{number}"] td:last-child');
  return {{ cls: td.className, color: getComputedStyle(td).color, text: td.textContent }};
}})()"""


def test_a_pruned_trials_reason_is_grey_not_a_red_error(live: tuple[Database, str, str]) -> None:
    db, base, study_id = live
    with db.session() as s:
        trials = TrialRepo(s)
        pruned = trials.create_pruned(
            study_id,
            params={"micro_batch_size": 128, "precision": "fp32"},
            config={},
            error_class="oom",
            error_message="predicted out of memory: needs 160 GiB of 80",
        ).number
        row = trials.create_running(
            study_id, params={"micro_batch_size": 64, "precision": "fp32"}, config={}
        )
        oom = TrialResult.failure(FailureClass.OOM, "CUDA out of memory")
        trials.finish(
            row,
            TrialState.INFEASIBLE,
            result=oom,
            error_class="oom",
            error_message="CUDA out of memory",
        )
        failed = row.number
    with Browser() as b:
        b.open(f"{base}/studies/{study_id}", ready="document.body.dataset.tableView")
        grey, red = b.eval(_computed("var(--muted)")), b.eval(_computed("var(--bad)"))
        assert grey != red
        why = b.eval(_reason_cell(pruned))
        assert why == {
            "cls": "why",
            "color": grey,
            "text": "oom: predicted out of memory: needs 160 GiB of 80",
        }
        # Against a real failure in the same table: that one is red.
        err = b.eval(_reason_cell(failed))
        assert err["cls"] == "err" and err["color"] == red
        state = f"#trials tr[data-number='{pruned}'] .state"
        assert b.eval(f"getComputedStyle(document.querySelector({json.dumps(state)})).color") == (
            grey
        )
        assert _page_errors(b) == []
