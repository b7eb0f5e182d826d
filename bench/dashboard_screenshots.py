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

With `--real DIR`, no replay: the SQLite databases of real studies in DIR (`tune-*.db`, as
`bench/tune_h200.sh` leaves them) are copied into one database in a temp dir (the committed
files are only read) and the dashboard is served over it: the studies list, the study page of
the study with the most trials, its per-knob strips and trials table, its best trial's page,
and the page of the study whose best is furthest above its expert default, each saved as
`h200-*.png`.

    python bench/dashboard_screenshots.py --real bench/results/h200_session_20261203
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
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


def merge_databases(sources: list[Path], target: Path) -> None:
    """One SQLite database at `target` holding every study of `sources` (same schema), made
    from copies in `target`'s folder: SQLite writes beside a WAL database it opens, even to
    read it, and the sources stay untouched. Trial row ids are renumbered (study ids are
    unique)."""
    copies = []
    for i, src in enumerate(sources):
        copies.append(target.parent / f"source-{i}.db")
        shutil.copyfile(src, copies[-1])
    shutil.move(copies[0], target)
    with sqlite3.connect(target) as dst:
        for copy in copies[1:]:
            dst.execute("ATTACH DATABASE ? AS src", (str(copy),))
            cols = [r[1] for r in dst.execute("PRAGMA src.table_info(trials)") if r[1] != "id"]
            names = ", ".join(cols)
            dst.execute("INSERT INTO studies SELECT * FROM src.studies")
            dst.execute(f"INSERT INTO trials ({names}) SELECT {names} FROM src.trials")
            dst.commit()
            dst.execute("DETACH DATABASE src")


def vs_default(db: Database, study_id: str) -> float:
    """How many times its expert default's tokens/s the study's best reached (0 if unknown)."""
    best = operations.get_best(db, study_id)["best"] or {}
    ratio = (best.get("vs_expert_default") or {}).get("speedup")
    return float(ratio or 0.0)


def real_screenshots(source: Path, out: Path) -> None:
    sources = sorted(source.glob("tune-*.db"))
    if not sources:
        raise SystemExit(f"no tune-*.db in {source}")
    target = Path(tempfile.mkdtemp(prefix="screens-real-")) / "real.db"
    merge_databases(sources, target)
    url = f"sqlite:///{target}"
    upgrade_database(url)  # a no-op at the current head; older recordings are brought up to it
    db = Database(url)
    studies = operations.list_studies(db, limit=50)
    biggest = max(studies, key=lambda s: s["trials_total"])["id"]
    others = [s["id"] for s in studies if s["id"] != biggest] or [biggest]
    fastest = max(others, key=lambda i: vs_default(db, i))
    best = operations.get_best(db, biggest)["best"]
    # An ended study that recommends nothing (Llama 8B: every trial tight or out of memory).
    none = [s["id"] for s in studies if operations.get_best(db, s["id"])["best"] is None]
    charts = "document.body.dataset.charts"
    sorted_view = "document.body.dataset.tableView?.startsWith('sort=tokens_per_s')"
    # (file, address, ready when, viewport height, element scrolled to the top or None)
    shots = [
        (
            "h200-studies.png",
            "/",
            "document.getElementById('compare-button') !== null",
            240 + 52 * len(studies),  # the header, the filters and a row per study
            None,
        ),
        ("h200-study.png", f"/studies/{biggest}", charts, 1560, None),
        ("h200-study-strips.png", f"/studies/{biggest}", charts, 900, "effects"),
        (
            "h200-study-trials.png",
            f"/studies/{biggest}?sort=tokens_per_s&order=desc",
            sorted_view,
            900,
            "trials",
        ),
        ("h200-study-llama.png", f"/studies/{fastest}", charts, 1000, None),
    ]
    if best is not None:
        trial = f"/studies/{biggest}/trials/{best['trial_number']}"
        shots.append(("h200-trial.png", trial, "document.body.dataset.trialCharts", 1160, None))
    shots += [
        (f"h200-no-recommendation-{i}.png", f"/studies/{i}", charts, 1000, None) for i in none
    ]
    errors: list[str] = []
    for base in _serve(make_app(db)):
        for name, path, ready, height, scroll_to in shots:
            with Browser(width=1400, height=height) as b:
                b.open(base + path, ready=ready)
                if scroll_to == "effects":  # the card around the strips, its heading in view
                    b.eval("document.getElementById('effects').parentElement.scrollIntoView()")
                elif scroll_to:
                    b.eval(f"document.getElementById('{scroll_to}').scrollIntoView()")
                b.screenshot(out / name, full_page=False)
                errors += b.errors
    print(f"screenshots in {out}; studies {biggest}, {fastest}; page errors: {errors}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs/screenshots"))
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--real", metavar="DIR", help="screenshot the real studies in DIR/tune-*.db")
    args = ap.parse_args()
    out = Path(args.out)
    if args.real:
        real_screenshots(Path(args.real), out)
        return
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
            errors = list(b.errors)
    print(f"screenshots in {out}; studies {ours} (ours), {plain} (random); page errors: {errors}")


if __name__ == "__main__":
    main()
