"""Screenshots of the dashboard's views, on studies replayed from real H200 measurements.

Two studies search the recorded GPT-2 124M landscape of one H200 (bench/results/
landscape_gpt2_124m_h200.json: 60 configs measured on the GPU, failures included) through the
real coordinator and a ReplayExecutor, as `bench/replay.py` does: ours (TPE with the rules, the
cost model and the expert seed) and plain random search. Every trial's numbers, telemetry
included, are the GPU's; only the order in which the search met them is replayed. A proposal
the recording lacks is pruned as "not recorded in the landscape" (no GPU time).

Then the dashboard is served and driven in headless Chromium (tests/browser.py): the studies
list with two studies ticked, a study page (strip plots, the trials table), the table sorted by
tokens/s and filtered to the failures, the compare page and the best trial's page.
Prints the page errors Chromium reported (none expected).

    python bench/dashboard_screenshots.py [--out docs/screenshots] [--trials 40]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotuner.executors.replay import Landscape, ReplayExecutor
from autotuner.options import PLAIN_SAMPLER, StudyOptions
from autotuner.search.policy import Prune
from autotuner.spec import Knobs, canonical_params
from autotuner.storage.session import Database, upgrade_database
from autotuner.study import operations
from autotuner.study.coordinator import StudyRunner, create_study
from bench.replay_lib.universe import (
    Snapper,
    UniverseSampler,
    auto_space,
    landscape_model,
    universe,
)
from tests.browser import Browser
from tests.dashboard.conftest import make_app
from tests.dashboard.test_dashboard_browser import _serve

ROOT = Path(__file__).resolve().parent.parent
RECORDING = ROOT / "bench/results/landscape_gpt2_124m_h200.json"


def replay_study(
    db: Database, name: str, sampler: str, options: StudyOptions, trials: int, seed: int
) -> str:
    """One study over the recording, proposals snapped to recorded configs (bench/replay.py)."""
    landscape = Landscape.load(RECORDING)
    space = auto_space(landscape)
    table = universe(landscape, space)
    snap = Snapper(table, space)

    def recorded_only(params: dict[str, Any], knobs: Knobs) -> Prune | None:
        if canonical_params({k: params[k] for k in space.knobs}) not in table:
            return Prune("unsupported", "not recorded in the landscape", 1.0)
        return None

    study_id = create_study(
        db,
        model=landscape_model(landscape, None),
        space=space,
        name=name,
        max_trials=trials,
        sampler=sampler,
        seed=seed,
        options=options,
    )
    executor = ReplayExecutor(landscape, list(space.knobs), target=landscape.target())
    runner = StudyRunner(
        db,
        study_id,
        executor,
        poll_s=0.0,
        seeds=snap.many,
        screen=recorded_only,
        wrap_sampler=lambda inner: UniverseSampler(inner, snap),
        candidates=lambda: [dict(c) for c in snap.recorded],
    )
    runner.run()
    return study_id


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs/screenshots"))
    ap.add_argument("--trials", type=int, default=40)
    args = ap.parse_args()
    out = Path(args.out)
    url = f"sqlite:///{tempfile.mkdtemp(prefix='screens-')}/dash.db"
    upgrade_database(url)
    db = Database(url)
    ours = replay_study(db, "gpt2-124m-h200-ours", "tpe", StudyOptions(), args.trials, 0)
    plain = replay_study(db, "gpt2-124m-h200-random", "random", PLAIN_SAMPLER, args.trials, 1)
    best = operations.get_best(db, ours)["best"]
    for base in _serve(make_app(db)):
        with Browser(width=1400, height=900) as b:
            b.open(f"{base}/", ready="document.getElementById('compare-button') !== null")
            b.click(f"input[name=pick][value={ours}]")
            b.click(f"input[name=pick][value={plain}]")
            b.screenshot(out / "studies-compare-pick.png")
            b.open(f"{base}/studies/{ours}", ready="document.body.dataset.charts")
            b.screenshot(out / "study-views.png")
            b.eval("document.getElementById('effects').parentElement.scrollIntoView()")
            b.screenshot(out / "study-strips.png", full_page=False)
            b.open(
                f"{base}/studies/{ours}?sort=tokens_per_s&order=desc",
                ready="document.body.dataset.tableView?.startsWith('sort=tokens_per_s')",
            )
            b.eval("document.getElementById('trials').scrollIntoView()")
            b.screenshot(out / "study-trials-sorted.png", full_page=False)
            b.open(
                f"{base}/studies/{ours}?state=failed",
                ready="document.body.dataset.tableView?.includes('state=')",
            )
            b.eval("document.getElementById('trials').scrollIntoView()")
            b.screenshot(out / "study-trials-failures.png", full_page=False)
            b.open(f"{base}/compare?a={ours}&b={plain}", ready="document.body.dataset.compared")
            b.screenshot(out / "compare.png")
            b.open(
                f"{base}/studies/{ours}/trials/{best['trial_number']}",
                ready="document.body.dataset.trialCharts",
            )
            b.screenshot(out / "trial-telemetry.png")
            errors = [e for e in b.errors if "favicon.ico" not in e]
    print(f"screenshots in {out}; studies {ours} (ours), {plain} (random); page errors: {errors}")


if __name__ == "__main__":
    main()
