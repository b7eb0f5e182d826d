"""What the pages said wrongly of the real H200 studies (bench/results/h200_session_20261201
and _20261203), each shape rebuilt here or read from the committed database: the list and the
progress line quoted a faster trial the recommendation had passed over for memory headroom as
the study's best; a finished study's fp8 winner said its parity check "runs at the end of the
study" after the study had ended without it; a time-only budget read "∞ trials / 10.0 min"; an
eager trial's compile cell was blank; the best-so-far line rose to the passed-over trial; four
micro-batch values' labels ran into each other on their strip plot."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from autotuner.search.objective import Objective
from autotuner.storage.models import Study
from autotuner.storage.session import Database, upgrade_database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study import operations
from autotuner.study.live import store_live_best
from autotuner.study.recommend import recommend
from tests.browser import Browser
from tests.dashboard.conftest import make_app
from tests.dashboard.test_dashboard_browser import _serve
from tests.dashboard.test_queries import _study_of
from tests.dashboard.test_views_browser import strip_label_overlaps

# Real studies on one H200 (its README says how): GPT-2 124M, 33 trials, 13 out of memory;
# Llama 8B, every trial out of memory or not run.
H200_SESSION = Path(__file__).resolve().parents[2] / "bench/results/h200_session_20261203"
LANDSCAPES = H200_SESSION.parent / "landscape_recording"


@pytest.fixture
def passed_over(sqlite_url: str) -> tuple[Database, str]:
    """A study whose fastest search trial is tight (less than the 10% headroom free), so the
    recommendation is a slower one, as in the 33-trial GPT-2 study (#7 tight, #2 recommended)."""
    db = Database(sqlite_url)
    study_id = _study_of(db, 20)
    store_live_best(db, study_id, Objective.TOKENS_PER_S)
    return db, study_id


def test_the_list_shows_the_recommended_value_not_a_passed_over_trial(
    passed_over: tuple[Database, str],
) -> None:
    db, study_id = passed_over
    best = operations.get_best(db, study_id)["best"]
    study = operations.get_study(db, study_id)
    assert best["headroom"]["passed_over"], "the fastest trial was passed over"
    assert study["best_value"] > best["objective_value"]  # the tight trial's value
    assert study["recommended_value"] == best["objective_value"]
    listed = operations.list_studies(db)[0]
    assert listed["recommended_value"] == best["objective_value"]
    page = TestClient(make_app(db)).get("/").text
    cell = re.search(r'<td class="num best-value">([^<]*)</td>', page)
    assert cell and cell.group(1) == f"{best['objective_value']:,.0f}"


def test_the_best_so_far_line_steps_over_a_passed_over_trial(
    passed_over: tuple[Database, str],
) -> None:
    """The 2026-12-03 GPT-2 study's chart drew its best-so-far line up to trial #16 (391,108
    tokens/s, 7.7% free) beside a header saying best so far 382,072 (trial #2)."""
    db, study_id = passed_over
    best = operations.get_best(db, study_id)["best"]
    tight = best["headroom"]["passed_over"][0]
    page = TestClient(make_app(db)).get(f"/studies/{study_id}?format=json").json()
    progress = page["charts"]["progress"]
    assert [tight["trial_number"], tight["objective_value"]] in [
        [n, v] for n, v in progress["points"]
    ], "the passed-over trial is still drawn as a point"
    assert max(v for _, v in progress["best"]) == pytest.approx(best["objective_value"])
    assert tight["trial_number"] not in [n for n, _ in progress["best"][:-1]]


def _finish_with_unchecked_fp8(db: Database, study_id: str, status: str) -> None:
    rec = dict(operations.get_best(db, study_id)["best"])
    rec["numerics"] = {  # the entry the real Llama 3B study stored (search/numerics.py)
        "checked": False,
        "passed": None,
        "precision": "fp8-tensorwise",
        "parity_trials": [],
        "skipped": [],
        "text": "fp8-tensorwise changes numerics and was not checked: the parity check runs "
        "at the end of the study, within its budget of trials and time",
    }
    with db.session() as s:
        s.execute(
            update(Study).where(Study.id == study_id).values(recommendation=rec, status=status)
        )


def test_an_ended_studys_unchecked_winner_says_its_check_did_not_run(
    passed_over: tuple[Database, str],
) -> None:
    db, study_id = passed_over
    _finish_with_unchecked_fp8(db, study_id, "running")
    running = operations.get_best(db, study_id)["best"]["numerics"]["text"]
    assert "runs at the end of the study" in running  # true while it runs
    _finish_with_unchecked_fp8(db, study_id, "completed")
    numerics = operations.get_best(db, study_id)["best"]["numerics"]
    assert "runs at the end" not in numerics["text"]
    assert "the study ended before its parity check against the reference" in numerics["text"]
    assert numerics["ended_unchecked"] is True
    page = TestClient(make_app(db)).get(f"/studies/{study_id}?format=json").json()
    assert page["best"]["numerics"]["text"] == numerics["text"]


def test_a_time_only_budget_reads_as_minutes(passed_over: tuple[Database, str]) -> None:
    db, study_id = passed_over
    with db.session() as s:
        s.execute(update(Study).where(Study.id == study_id).values(max_trials=None, max_minutes=10))
    page = TestClient(make_app(db)).get(f"/studies/{study_id}").text
    assert '<span id="budget">10 min</span>' in page
    assert "∞" not in page


@pytest.fixture
def page(passed_over: tuple[Database, str]) -> Iterator[tuple[Browser, str, dict]]:
    db, study_id = passed_over
    best = operations.get_best(db, study_id)["best"]
    for base in _serve(make_app(db)):
        with Browser(width=1400, height=900) as b:
            b.open(f"{base}/studies/{study_id}", ready="document.body.dataset.charts")
            yield b, study_id, best
            assert b.errors == [], b.errors  # no console error, no missing favicon either


@pytest.mark.browser
def test_the_progress_line_quotes_the_recommendation(page: tuple[Browser, str, dict]) -> None:
    b, _, best = page
    text = b.eval("document.getElementById('progress-text').textContent")
    value = f"{round(best['objective_value']):,}"
    assert f"best so far {value} tokens/s (trial #{best['trial_number']})" in text, text
    assert b.eval("document.getElementById('best-tps').textContent") == value


@pytest.mark.browser
def test_a_measured_trial_without_compile_time_reads_eager(
    page: tuple[Browser, str, dict],
) -> None:
    b, _, _ = page
    column = b.eval(
        "[...document.querySelectorAll('#trials thead th')].findIndex(th => "
        "th.dataset.sort === 'compile_s')"
    )
    cells = b.eval(
        "[...document.querySelectorAll('#trials tbody tr.complete')].map(tr => "
        f"tr.children[{column}].textContent)"
    )
    assert cells and set(cells) == {"eager"}, cells


def _committed(tmp_path: Path, name: str, session: Path = H200_SESSION) -> tuple[Database, str]:
    """A copy of a committed GPU study's database (SQLite writes beside a database it opens),
    brought to the current schema, and its study's id."""
    return _copied(tmp_path, session / f"tune-{name}.db")


def _copied(tmp_path: Path, committed: Path) -> tuple[Database, str]:
    copy = tmp_path / committed.name
    shutil.copyfile(committed, copy)
    url = f"sqlite:///{copy}"
    upgrade_database(url)
    db = Database(url)
    return db, operations.list_studies(db)[0]["id"]


def _rejudged(db: Database, study_id: str, mend: Callable[[list], None] | None = None) -> dict:
    """The study's recommendation as this code computes it at the study's end, over its trials
    (after `mend` brought them to what the worker records now), stored; the one stored before."""
    with db.session() as s:
        study = s.get(Study, study_id)
        assert study is not None
        before = dict(study.recommendation)
        trials = TrialRepo(s).list(study_id)
        if mend is not None:
            mend(trials)
        study.recommendation = {**before, **recommend(trials, Objective.TOKENS_PER_S)}
    return before


def _card_texts(db: Database, study_id: str, *ids: str) -> list[str]:
    """The text of each of the study page's elements `ids`, as Chromium draws the page (no page
    error allowed)."""
    for base in _serve(make_app(db)):
        with Browser(width=1400, height=900) as b:
            b.open(f"{base}/studies/{study_id}", ready="document.body.dataset.tableView")
            texts = [b.eval(f"document.getElementById('{i}').textContent") for i in ids]
            assert b.errors == [], b.errors
    return texts


@pytest.mark.browser
def test_the_real_studys_strip_labels_stay_apart(tmp_path: Path) -> None:
    db, study_id = _committed(tmp_path, "gpt2-failures")
    for base in _serve(make_app(db)):
        with Browser(width=1400, height=900) as b:
            b.open(f"{base}/studies/{study_id}", ready="document.body.dataset.charts")
            assert strip_label_overlaps(b) == []
            assert b.errors == [], b.errors


@pytest.mark.browser
def test_an_ended_study_without_a_measured_trial_says_so(tmp_path: Path) -> None:
    """Llama 8B on one H200: all 13 trials out of memory or not run. The card said "No
    completed trial yet." of the ended study, above export commands with nothing to export."""
    db, study_id = _committed(tmp_path, "llama-8b")
    for base in _serve(make_app(db)):
        with Browser(width=1400, height=900) as b:
            b.open(f"{base}/studies/{study_id}", ready="document.body.dataset.tableView")
            text = b.eval("document.getElementById('best-none').textContent")
            assert "No trial measured a throughput; all 13 failed or were not run" in text, text
            assert b.eval("document.getElementById('apply')") is None
            # No empty axes under the reason: the charts are not drawn at all.
            assert b.eval("document.getElementById('charts')") is None
            assert b.eval("document.getElementById('effects-card')") is None
            assert b.errors == [], b.errors


@pytest.mark.browser
def test_an_ended_study_whose_trials_were_all_tight_names_the_headroom_to_accept_one(
    tmp_path: Path,
) -> None:
    """Llama 8B on one H200 (2026-12-03, afternoon): both trials left 9.7% free of the 10%
    headroom. The card names the fastest and the --headroom that would accept it, in the
    words `best` prints."""
    from rich.console import Console

    from autotuner.cli.render import best_table

    db, study_id = _committed(
        tmp_path, "llama-8b", H200_SESSION.with_name("h200_session_20261203b")
    )
    console = Console(width=400, record=True)
    console.print(best_table(operations.get_best(db, study_id)))
    cli = console.export_text()
    for base in _serve(make_app(db)):
        with Browser(width=1400, height=900) as b:
            b.open(f"{base}/studies/{study_id}", ready="document.body.dataset.tableView")
            text = b.eval("document.getElementById('best-none').textContent")
            assert "The fastest, #1 at 13,305 tokens/s, left 9.7% free of the 10% kept" in text
            assert f"autotuner best {study_id} --headroom 0.09 re-judges" in text, text
            assert text.startswith("Nothing to recommend") and text[1:] in " ".join(cli.split())
            header = b.eval("document.getElementById('progress-text').textContent")
            assert header.endswith("· fastest 13,305 tokens/s, none recommendable"), header
            assert b.eval("document.getElementById('apply')") is None
            assert b.errors == [], b.errors


@pytest.mark.browser
def test_a_running_study_with_only_tight_trials_hides_the_export_commands(tmp_path: Path) -> None:
    """Llama 8B's two tight trials, as the page showed them while the study ran: no best to
    export yet, so the export commands (which would refuse) are hidden, and the card says
    none of the measured trials is recommendable yet."""
    db, study_id = _committed(
        tmp_path, "llama-8b", H200_SESSION.with_name("h200_session_20261203b")
    )
    with db.session() as s:
        s.execute(
            update(Study)
            .where(Study.id == study_id)
            .values(status="running", finished_at=None, recommendation=None)
        )
    for base in _serve(make_app(db)):
        with Browser(width=1400, height=900) as b:
            b.open(f"{base}/studies/{study_id}", ready="document.body.dataset.tableView")
            text = b.eval("document.getElementById('best-none').textContent")
            assert text.startswith("No recommendable trial yet: each of the 2 measured"), text
            assert b.eval("document.getElementById('apply').hidden") is True
            assert b.errors == [], b.errors


@pytest.mark.browser
def test_the_card_says_the_winner_was_timed_at_the_power_cap(tmp_path: Path) -> None:
    """Llama 3B on one H200 (2026-12-04, seventh session): every trial ran at the board's power
    cap. The card gives the winner's mean SM clock and the cap, in the words `best` prints."""
    db, study_id = _committed(tmp_path, "llama-3b", H200_SESSION.parent / "h200_session_20261204g")
    assert "gpu_clock" not in _rejudged(db, study_id)  # stored before
    (text,) = _card_texts(db, study_id, "best-clock")
    assert text.startswith("GPU clock: 1,553 MHz mean of 1,980 max, held at the power cap")
    assert "(691 W, SwPowerCap)" in text, text


@pytest.mark.browser
def test_the_card_says_why_the_end_checks_did_not_run(sqlite_url: str) -> None:
    """A 10-minute study whose one compiled trial took 380 s: its headroom check would have
    ended 5.8 min past the budget and did not start. The card says why the search stopped and
    that the check did not run, as `best` does."""
    from tests.fakes import run_study_whose_checks_cannot_fit

    db = Database(sqlite_url)
    study_id, _ = run_study_whose_checks_cannot_fit(db)
    for base in _serve(make_app(db)):
        with Browser(width=1400, height=900) as b:
            b.open(f"{base}/studies/{study_id}", ready="document.body.dataset.charts")
            search = b.eval("document.getElementById('best-search').textContent")
            assert search.startswith("Search: ") and "end checks not started at" in search
            assert "past the time budget (the headroom check" in search, search
            memory = b.eval("document.getElementById('best-memory').textContent")
            assert memory.endswith("the study ended before its check ran"), memory
            assert b.errors == [], b.errors


@pytest.mark.browser
def test_the_card_says_which_regions_the_trainer_must_compile(tmp_path: Path) -> None:
    """Qwen2.5-1.5B's landscape on one H100 (2026-12-07): its best config compiled each decoder
    layer and the output layer with its loss on its own. The card gives the cold compile and
    the regions, in the words `best` prints: a trainer that compiles the whole model instead
    does not get the speed measured."""
    db, study_id = _copied(tmp_path, LANDSCAPES / "qwen2.5-1.5b-instruct.db")
    regions = "28 Qwen2DecoderLayer blocks and the output layer with its loss"
    note = f"compile_scope block: {regions} compiled (default)"

    def with_the_field(trials: list) -> None:  # recorded before the result had it: the note
        for t in trials:
            if t.result and note in t.result.get("notes", []):
                t.result = {**t.result, "compiled_regions": regions}

    _rejudged(db, study_id, with_the_field)
    compile_text, compiled = _card_texts(db, study_id, "best-compile", "best-compiled")
    assert compile_text == "Compile time: 14.4 s cold (trial #18) (not in throughput)"
    assert compiled.startswith(f"Compiled: {regions}, each compiled on its own: your")


@pytest.mark.browser
def test_the_card_gives_the_winners_fresh_run_beside_the_recommended_figure(
    tmp_path: Path,
) -> None:
    """Qwen2.5-1.5B's 10-minute tune on one H100 (2026-12-07): the winner's headroom check
    timed it again in a fresh process, 1.1% above the figure recommended and beyond the noise
    band; the card says so, in `best`'s words."""
    db, study_id = _committed(
        tmp_path, "qwen2.5-1.5b", H200_SESSION.parent / "hf_tune_h100_qwen2.5"
    )
    assert "fresh_run" not in _rejudged(db, study_id)  # stored before
    (text,) = _card_texts(db, study_id, "best-fresh-run")
    assert text.startswith("Fresh run: 50,059 tokens/s in its headroom check (trial #7")
    assert "+1.1% from the 49,519 recommended, beyond the noise band" in text, text
