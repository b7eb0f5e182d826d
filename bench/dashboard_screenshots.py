"""Every screenshot under docs/screenshots, from one command, on real H200 measurements.

    python bench/dashboard_screenshots.py [--out docs/screenshots] [--only FILE ...]

Three sources, each served by the dashboard and driven in headless Chromium (tests/browser.py);
every screenshot this writes is referenced from README.md, and nothing else lives in the folder:

- Real studies, `bench/results/h200_session_20261203/tune-*.db` (as `bench/tune_h200.sh` leaves
  them): copied into one database in a temp dir (the committed files are only read), each
  study's recommendation re-judged by the current code (`rejudge`: what `tune` would store at
  its end today, knob importance included), then the studies list, the study with the most
  trials (its page, its per-knob strips, its trials sorted by tokens/s, its best trial's page)
  and the study whose best is furthest above its expert default: `h200-*.png`.
- The Llama 8B study of `bench/results/h200_session_20261206b`, re-judged the same way: its
  recommendation settles a tie for the reference numerics (`study-tie-reference-numerics.png`).
- Replays over the recorded H200 landscapes (`bench/results/landscape_*_h200.json`) through the
  real coordinator and a ReplayExecutor, as `bench/replay.py` does: every trial's numbers are
  the GPU's, only the order in which the search met them is replayed (a proposal the recording
  lacks is pruned as "not recorded in the landscape"). An 8-trial Llama 3B study without a
  time budget (its fp8 seed may run before the expert default:
  `study-expert-default-second.png`, `trial-expert-default.png`), and GPT-2 124M searched by
  ours and by plain random search, ticked on the list and compared (`studies-compare-pick.png`,
  `compare.png`).
- A study run through the real coordinator on a ReplayExecutor whose worker cannot import the
  model's package: it fails at its first trial, and its page says why in one line, with its
  trials and no empty chart (`study-failed-environment.png`).

`--only FILE ...` takes just those screenshots (the rest of the folder stays as it is): a change
to one page need not rewrite every image.

Prints the page errors Chromium reported (none expected). `--real DIR --out ELSEWHERE` takes
the `h200-*.png` views of another session's databases instead, to look at.
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
from autotuner.spec import FailureClass, Knobs, TrialResult, canonical_params
from autotuner.storage.session import Database, upgrade_database
from autotuner.study import operations, trial_reads
from autotuner.study.coordinator import StudyRunner, create_study
from bench.replay_lib.universe import (
    Snapper,
    UniverseSampler,
    auto_space,
    landscape_model,
    universe,
)
from tests.browser import Browser
from tests.coordinator.test_study_ends import _run as run_ending_study
from tests.dashboard.conftest import make_app
from tests.dashboard.test_dashboard_browser import _serve

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench/results"
GPT2 = RESULTS / "landscape_gpt2_124m_h200.json"
LLAMA_3B = RESULTS / "landscape_llama_3b_h200.json"
SESSION = RESULTS / "h200_session_20261203"  # GPT-2 with failures, Llama 1B, 3B and 8B
TIE_SESSION = RESULTS / "h200_session_20261206b"  # Llama 8B: a tie settled for numerics
CHARTS = "document.body.dataset.charts"
# What a worker without transformers says for an `hf` model (workers/models/hf.py).
NO_HF = (
    "the worker cannot import transformers (ModuleNotFoundError: No module named "
    "'transformers'), which family 'hf' needs: pip install transformers in the workers' "
    "Python environment"
)


def replay_study(
    db: Database,
    recording: Path,
    name: str,
    sampler: str,
    options: StudyOptions,
    trials: int,
    seed: int,
) -> str:
    """One study over `recording`, proposals snapped to recorded configs (bench/replay.py)."""
    landscape = Landscape.load(recording)
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


def rejudge(db: Database, study_id: str) -> None:
    """Store the recommendation the current code makes of the study's trials, as the study's
    end does (study/lifecycle.py `finish`): a recording's stored one is what the code of its day
    said. What only the run knew (why the search stopped, the models' evidence) is kept."""
    from autotuner.search.objective import Objective
    from autotuner.storage.study_repo import StudyRepo
    from autotuner.study.live import end_of_study_rows
    from autotuner.study.recommend import knob_importance, recommend_ranked

    with db.read() as s:
        study = StudyRepo(s).require(study_id)
        objective, options = Objective(study.objective), study.options
        kept = dict(study.recommendation or {})
        trials = end_of_study_rows(s, study_id)
        rec, ranked = recommend_ranked(trials, objective, options=options)
    if rec is None:
        return
    rec = rec.with_entries(importance=knob_importance(ranked, rec.noise_rel)).as_ended()
    with db.session() as s:
        study = StudyRepo(s).require(study_id)
        study.recommendation = {**kept, **rec.stored()}
        study.best_trial_number = rec.trial_number  # stored beside it, as live.py does


def copied(sources: list[Path]) -> Database:
    """The studies of `sources` in one database of a temp dir, re-judged by the current code."""
    if not sources:
        raise SystemExit("no tune-*.db to screenshot: the session folders hold them")
    target = Path(tempfile.mkdtemp(prefix="screens-real-")) / "real.db"
    merge_databases(sources, target)
    url = f"sqlite:///{target}"
    upgrade_database(url)  # a no-op at the current head; older recordings are brought up to it
    db = Database(url)
    for study in operations.list_studies(db, limit=50):
        rejudge(db, study["id"])
    return db


Shot = tuple[str, str, str, int, str | None]  # file, address, ready when, height, scrolled to


# The screenshots to take (None: all of them), from --only.
ONLY: set[str] | None = None


def wanted(name: str) -> bool:
    return ONLY is None or name in ONLY


def shoot(db: Database, out: Path, shots: list[Shot], width: int = 1400) -> list[str]:
    """Each shot of the dashboard served over `db`; the page errors Chromium reported."""
    errors: list[str] = []
    shots = [shot for shot in shots if wanted(shot[0])]
    if not shots:
        return errors
    for base in _serve(make_app(db)):
        for name, path, ready, height, scroll_to in shots:
            with Browser(width=width, height=height) as b:
                b.open(base + path, ready=ready)
                if scroll_to == "effects":  # the card around the strips, its heading in view
                    b.eval("document.getElementById('effects').parentElement.scrollIntoView()")
                elif scroll_to:
                    b.eval(f"document.getElementById('{scroll_to}').scrollIntoView()")
                b.screenshot(out / name, full_page=False)
                errors += b.errors
    return errors


def real_screenshots(out: Path, session: Path = SESSION) -> list[str]:
    db = copied(sorted(session.glob("tune-*.db")))
    studies = operations.list_studies(db, limit=50)
    biggest = max(studies, key=lambda s: s["trials_total"])["id"]
    others = [s["id"] for s in studies if s["id"] != biggest] or [biggest]
    fastest = max(others, key=lambda i: vs_default(db, i))
    best = operations.get_best(db, biggest)["best"]
    sorted_view = "document.body.dataset.tableView?.startsWith('sort=tokens_per_s')"
    shots: list[Shot] = [
        (
            "h200-studies.png",
            "/",
            "document.getElementById('compare-button') !== null",
            240 + 52 * len(studies),  # the header, the filters and a row per study
            None,
        ),
        ("h200-study.png", f"/studies/{biggest}", CHARTS, 1560, None),
        ("h200-study-strips.png", f"/studies/{biggest}", CHARTS, 900, "effects"),
        (
            "h200-study-trials.png",
            f"/studies/{biggest}?sort=tokens_per_s&order=desc",
            sorted_view,
            900,
            "trials",
        ),
        ("h200-study-llama.png", f"/studies/{fastest}", CHARTS, 1000, None),
    ]
    if best is not None:
        trial = f"/studies/{biggest}/trials/{best['trial_number']}"
        shots.append(("h200-trial.png", trial, "document.body.dataset.trialCharts", 1160, None))
    errors = shoot(db, out, shots)
    if session != SESSION:
        print(f"real: studies {biggest}, {fastest} of {session}")
        return errors
    tie = copied(sorted(TIE_SESSION.glob("tune-*.db")))
    (study,) = operations.list_studies(tie, limit=2)
    errors += shoot(
        tie,
        out,
        [("study-tie-reference-numerics.png", f"/studies/{study['id']}", CHARTS, 900, None)],
        width=1280,
    )
    print(f"real: studies {biggest}, {fastest}, {study['id']} (tie)")
    return errors


def replay_screenshots(out: Path) -> list[str]:
    url = f"sqlite:///{tempfile.mkdtemp(prefix='screens-')}/dash.db"
    upgrade_database(url)
    db = Database(url)
    ours = replay_study(db, GPT2, "gpt2-124m-h200-ours", "tpe", StudyOptions(), 40, 0)
    plain = replay_study(db, GPT2, "gpt2-124m-h200-random", "random", PLAIN_SAMPLER, 40, 1)
    llama = replay_study(db, LLAMA_3B, "llama-3b-h200-untimed", "tpe", StudyOptions(), 8, 0)
    expert = next(
        t["number"]
        for t in trial_reads.list_trials(db, llama)
        if t["purpose"] == "expert-default" and t["state"] == "complete"
    )
    failed, _ = run_ending_study(db, TrialResult.failure(FailureClass.ENVIRONMENT, NO_HF))
    errors = shoot(
        db,
        out,
        [
            (
                "study-failed-environment.png",
                f"/studies/{failed}",
                "document.getElementById('best-none') !== null",
                600,  # the reason and the trials table: no chart below them
                None,
            ),
            ("study-expert-default-second.png", f"/studies/{llama}", CHARTS, 900, None),
            (
                "trial-expert-default.png",
                f"/studies/{llama}/trials/{expert}",
                "document.body.dataset.trialCharts",
                900,
                None,
            ),
            (
                "compare.png",
                f"/compare?a={ours}&b={plain}",
                "document.body.dataset.compared",
                900,
                None,
            ),
        ],
    )
    for base in _serve(make_app(db)) if wanted("studies-compare-pick.png") else ():
        with Browser(width=1400, height=420) as b:
            b.open(f"{base}/", ready="document.getElementById('compare-button') !== null")
            b.click(f"input[name=pick][value={ours}]")
            b.click(f"input[name=pick][value={plain}]")
            b.screenshot(out / "studies-compare-pick.png", full_page=False)
            errors += b.errors
    print(f"replayed: {ours} (ours), {plain} (random), {llama} (Llama 3B, expert #{expert})")
    return errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs/screenshots"))
    ap.add_argument(
        "--real",
        metavar="DIR",
        help="only the h200-*.png views, of another session's DIR/tune-*.db (to look at, "
        "with --out elsewhere: docs/screenshots shows the session the README describes)",
    )
    ap.add_argument(
        "--only",
        nargs="+",
        metavar="FILE",
        help="take only these screenshots (file names, e.g. study-failed-environment.png)",
    )
    args = ap.parse_args()
    global ONLY
    ONLY = set(args.only) if args.only else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # The real sessions' views are the h200-*.png and the tie's; the rest are replays.
    real = ONLY is None or any(n.startswith("h200-") or "tie" in n for n in ONLY)
    replayed = ONLY is None or any(not (n.startswith("h200-") or "tie" in n) for n in ONLY)
    if args.real:
        errors = real_screenshots(out, Path(args.real))
    else:
        errors = (real_screenshots(out) if real else []) + (
            replay_screenshots(out) if replayed else []
        )
    print(f"screenshots in {out}; page errors: {errors}")


if __name__ == "__main__":
    main()
