"""Issue 42's page defects, in a real headless Chromium at a normal and a narrow width, on a
study of 10,000 trials (bench/reads_lib/seed.py's rows, the ones the coordinator writes, bulk
inserted into SQLite in about 3 s) and a study with a 200-character name:

- the per-knob strips' labels (each value, its measured count, its failures) do not run into
  each other (at 10,000 trials "1234, 56✗" ran into its neighbour);
- a pruned trial's reason is one line, as a measured row is (a narrow reason column wrapped
  it to seven);
- re-measurements and end checks are tagged with what they ran for, and a single-repeat
  trial says so, not a precise-looking ±0.0%;
- a long study name keeps the studies list's columns on screen.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.models import TrialState
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import create_study
from bench.reads_lib.seed import seed_study
from tests.browser import Browser
from tests.dashboard.conftest import make_app
from tests.dashboard.test_dashboard_browser import _serve
from tests.fakes import measured

pytestmark = pytest.mark.browser
WIDTHS = (1400, 700)  # a laptop's window, and half of it
LONG_NAME = "llama-3b-fp8-sweep-" + "with-every-attention-kernel-and-compile-mode-" * 4
WHY = (
    "predicted out of memory: needs 160.2 GiB of the 139.8 GiB the GPU has, with activation "
    "checkpointing off and the fused AdamW's fp32 state for every parameter (rule: memory)"
)

# Each pair of neighbouring tick labels of every strip, line by line, whose text overlaps.
OVERLAPS = """(() => {
  const out = [];
  for (const canvas of document.querySelectorAll('#effects canvas')) {
    const chart = Chart.getChart(canvas), x = chart.scales.x, ctx = chart.ctx;
    ctx.save();
    ctx.font = Chart.helpers.toFont(x.options.ticks.font).string;
    const px = (t) => x.getPixelForValue(t.value);
    const items = x.ticks.map((t) => ({ px: px(t), lines: [t.label].flat() }));
    for (let i = 1; i < items.length; i++) {
      const a = items[i - 1], b = items[i];
      for (let k = 0; k < Math.min(a.lines.length, b.lines.length); k++) {
        const wa = ctx.measureText(a.lines[k]).width, wb = ctx.measureText(b.lines[k]).width;
        if (a.px + wa / 2 > b.px - wb / 2) out.push(`${canvas.id}: ${a.lines[k]} | ${b.lines[k]}`);
      }
    }
    ctx.restore();
  }
  return out;
})()"""


def _row(number: int) -> str:
    return f"document.querySelector('#trials tr[data-number=\"{number}\"]')"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, dict[str, int]]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('tables')}/dash.db"
    from autotuner.storage.session import upgrade_database

    upgrade_database(url)
    db = Database(url)
    big = seed_study(db, trials=10_000, name="big", rng=random.Random(0))
    with db.session() as s:  # the newest page: a pruned, a single-repeat and a re-run trial
        trials = TrialRepo(s)
        params = {"micro_batch_size": 64, "precision": "bf16"}
        numbers = {
            "pruned": trials.create_pruned(
                big, params=params, config={}, error_class="oom", error_message=WHY
            ).number
        }
        for name, purpose, low, high in (
            ("single", "search", 30_000.0, 30_000.0),
            ("remeasure", "remeasure", 29_700.0, 30_300.0),
            ("headroom", "headroom", 29_800.0, 30_200.0),
        ):
            row = trials.create_running(big, params=params, config={}, purpose=purpose)
            result = measured(30_000.0).model_copy(
                update={"tokens_per_s_min": low, "tokens_per_s_max": high}
            )
            trials.finish(row, TrialState.COMPLETE, result=result, objective_value=30_000.0)
            numbers[name] = row.number
    create_study(
        db,
        model=ModelSpec.resolve({"preset": "tiny"}),
        space=parse_space({"name": "dash", "knobs": {"micro_batch_size": [8, 16]}}),
        max_trials=4,
        name=LONG_NAME,
    )
    for base in _serve(make_app(db)):
        yield base, big, numbers


@pytest.mark.parametrize("width", WIDTHS)
def test_the_pages_at_10000_trials_stay_readable(
    served: tuple[str, str, dict[str, int]], width: int
) -> None:
    base, big, numbers = served
    with Browser(width=width, height=900) as b:
        b.open(f"{base}/studies/{big}", ready="document.body.dataset.charts")
        b.wait_for("document.body.dataset.tableRows")
        assert b.eval(OVERLAPS) == []
        # One line per row: the pruned trial's row is as tall as a measured one's.
        heights = b.eval(
            f"[{_row(numbers['pruned'])}.offsetHeight, {_row(numbers['single'])}.offsetHeight]"
        )
        assert heights[0] == heights[1], heights
        why = b.eval(f"{_row(numbers['pruned'])}.lastElementChild.title")
        assert why == f"oom: {WHY}"  # all of it, in the tooltip
        states = {name: b.eval(f"{_row(n)}.children[1].textContent") for name, n in numbers.items()}
        assert states["remeasure"] == "complete re-measurement", states
        assert states["headroom"] == "complete headroom check", states
        assert states["single"] == "complete", states
        spread = b.eval(f"{_row(numbers['single'])}.children[3].textContent")
        assert spread == "1 repeat"
        assert "±0.0%" not in b.eval("document.querySelector('#trials').textContent")
        assert b.errors == []

        b.open(f"{base}/", ready="document.getElementById('studies') !== null")
        cell = "document.querySelector('#studies td.name')"
        assert b.eval(f"{cell}.title") == LONG_NAME  # all of it, in the tooltip
        if width >= 1400:  # every column on screen in a normal window, whatever the name
            table = "document.getElementById('studies')"
            fits = b.eval(f"[{table}.scrollWidth, {table}.parentElement.clientWidth]")
            assert fits[0] <= fits[1], fits
        assert b.errors == []
