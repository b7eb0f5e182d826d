"""The numerics check on the trial page: a parity run's loss per step beside its partner's and
the verdict (issue 10: "show it in `best` and the dashboard"), served from a real study whose
fp8 winner was checked (the replayed landscape answers the parity steps: tests/fakes.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from rich.console import Console

from autotuner.cli.render import trials_table
from autotuner.executors.base import Target
from autotuner.search.numerics import PARITY_STEPS
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import StudyRunner, create_study
from tests.browser import Browser
from tests.dashboard.conftest import make_app
from tests.dashboard.test_dashboard_browser import _serve
from tests.fakes import FakeParityReplay, measured

H200 = Target("cuda", 1, "replay", (9, 0), 80.0)
KNOBS = {"precision": ["bf16", "fp8-tensorwise"]}
OPTIMIZERS = ("adamw-fused", "adamw-8bit")


def _checked_study(
    db: Database, drifting: tuple[str, ...] = (), knob: str = "precision"
) -> tuple[str, int, int]:
    """A finished study whose winner ran the numerics check: (id, reference #, candidate #).
    Its winner is fp8 (`knob` "precision") or bf16 with 8-bit moments (`knob` "optimizer")."""
    from autotuner.executors.replay import Landscape

    slow, fast = {"precision": ("bf16", "fp8-tensorwise"), "optimizer": OPTIMIZERS}[knob]
    landscape = Landscape(
        [
            ({knob: slow}, measured(18_000.0, peak_mem_gib=8.0, wall_s=10.0)),
            ({knob: fast}, measured(20_000.0, peak_mem_gib=8.0, wall_s=10.0)),
        ]
    )
    knobs = {knob: [slow, fast]}
    space = parse_space({"name": "numerics", "knobs": knobs, "fixed": {"attention": "efficient"}})
    model = ModelSpec.resolve({"preset": "tiny"})
    study_id = create_study(db, model=model, space=space, max_trials=12)
    executor = FakeParityReplay(landscape, list(knobs), target=H200, drifting=drifting)
    StudyRunner(db, study_id, executor, poll_s=0.0, heartbeat_interval_s=3600).run()
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
    (ref,) = [t.number for t in trials if t.purpose == "parity-ref"]
    # The candidate's steps ran in its headroom check (a runner-up's check runs none).
    (cand,) = [
        t.number
        for t in trials
        if t.purpose == "headroom" and t.config["measure"].get("parity_steps")
    ]
    return study_id, ref, cand


def test_both_runs_pages_show_the_curves_and_the_verdict(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    study_id, ref, cand = _checked_study(db)
    client = TestClient(make_app(db))
    for number, role in ((ref, "reference"), (cand, "candidate")):
        data = client.get(f"/studies/{study_id}/trials/{number}?format=json").json()
        num = data["numerics"]
        assert num["role"] == role
        assert num["reference"]["number"] == ref and num["reference"]["precision"] == "bf16"
        assert num["candidate"]["number"] == cand
        assert num["candidate"]["precision"] == "fp8-tensorwise"
        assert len(num["reference"]["curve"]) == len(num["candidate"]["curve"]) == PARITY_STEPS
        assert num["text"].startswith("loss within") and "of bf16" in num["text"]
    page = client.get(f"/studies/{study_id}/trials/{ref}").text
    assert "Numerics check: the reference" in page and "Loss within" in page
    # A parity run's tokens/s counts its compiling first step: not shown as a measurement.
    assert 'id="not-measured"' in page and "median of 0 timed repeats" not in page
    # The candidate's run is its headroom check: a measured trial, its tokens/s shown.
    page = client.get(f"/studies/{study_id}/trials/{cand}").text
    assert 'id="not-measured"' not in page and "timed repeats" in page
    # A measured trial of the search has no numerics card.
    data = client.get(f"/studies/{study_id}/trials/0?format=json").json()
    assert data["numerics"] is None


def test_an_8bit_winners_runs_are_named_by_their_moments(sqlite_url: str) -> None:
    """bf16 against bf16 says nothing: the two runs differ in their AdamW moments."""
    db = Database(sqlite_url)
    study_id, ref, cand = _checked_study(db, knob="optimizer")
    client = TestClient(make_app(db))
    num = client.get(f"/studies/{study_id}/trials/{ref}?format=json").json()["numerics"]
    assert num["reference"]["name"] == "bf16 with fp32 AdamW moments"
    assert num["candidate"]["name"] == "bf16 with 8-bit AdamW moments"
    page = client.get(f"/studies/{study_id}/trials/{ref}").text
    assert "this trial, bf16 with fp32 AdamW moments" in page
    assert f"trial #{cand}</a>, bf16 with 8-bit AdamW moments" in page


def test_the_study_page_shows_no_throughput_for_a_parity_run(sqlite_url: str) -> None:
    """The 2026-12-03 Llama 3B study listed its parity reference (bf16, 50 steps of one
    micro-batch, the loss read back each step) as an fp8 trial at 10,261 tokens/s beside the
    fp8 winner's 30,615: its row carries the candidate's params."""
    db = Database(sqlite_url)
    study_id, ref, _ = _checked_study(db)
    with db.read() as s:
        stored = TrialRepo(s).get(study_id, ref)
        assert stored is not None and stored.tokens_per_s  # the column holds the run's rate
    data = TestClient(make_app(db)).get(f"/studies/{study_id}?format=json").json()
    (row,) = [t for t in data["trials"] if t["number"] == ref]
    assert row["params"]["precision"] == "fp8-tensorwise"  # the candidate it checks
    assert row["tokens_per_s"] is None and row["mfu"] is None
    drawn = [n for n, _ in data["charts"]["progress"]["points"]]
    assert ref not in drawn and len(drawn) >= 2
    # `autotuner trials` at 80 columns: no tokens/s on its row, and a line saying what it is.
    console = Console(width=80, record=True)
    console.print(trials_table({"id": study_id, "status": "completed"}, data["trials"]))
    text = console.export_text()
    (line,) = [ln for ln in text.splitlines() if ln.split()[:1] == [str(ref)]]
    assert "1,000" not in line and "fp8-tensorwise" in line, text
    assert f"#{ref} the numerics check's reference" in text, text


def test_a_drifting_candidate_page_says_it_failed(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    study_id, _, cand = _checked_study(db, drifting=("fp8-tensorwise",))
    data = TestClient(make_app(db)).get(f"/studies/{study_id}/trials/{cand}?format=json").json()
    assert "beyond the tolerance" in data["numerics"]["text"]
    assert data["trial"]["state"] == "infeasible" and data["trial"]["error_class"] == "numerics"


@pytest.fixture
def served(sqlite_url: str) -> Iterator[tuple[str, str, int, int]]:
    db = Database(sqlite_url)
    study_id, ref, cand = _checked_study(db)
    for base in _serve(make_app(db)):
        yield base, study_id, ref, cand


@pytest.mark.browser
def test_the_trial_page_draws_both_curves(served: tuple[str, str, int, int]) -> None:
    base, study_id, ref, cand = served
    with Browser() as b:
        b.open(
            f"{base}/studies/{study_id}/trials/{cand}", ready="document.body.dataset.trialCharts"
        )
        chart = "Chart.getChart(document.getElementById('chart-parity'))"
        labels = b.eval(f"{chart}.data.datasets.map(d => d.label)")
        assert labels == [f"reference: #{ref} bf16", f"candidate: #{cand} fp8-tensorwise"]
        assert b.eval(f"{chart}.data.datasets.map(d => d.data.length)") == [PARITY_STEPS] * 2
        assert "Loss within" in b.eval("document.getElementById('numerics-verdict').textContent")
        assert list(b.errors) == []


@pytest.mark.browser
def test_the_study_table_says_parity_run_where_a_throughput_would_be(
    served: tuple[str, str, int, int],
) -> None:
    """Which purposes are no measurement comes from the service (trial_list.NOT_MEASUREMENTS),
    not a copy of the list in the page's script."""
    base, study_id, ref, _ = served
    with Browser() as b:
        b.open(f"{base}/studies/{study_id}", ready="document.body.dataset.tableView")
        cell = f"document.querySelector('#trials tr[data-number=\"{ref}\"] td:nth-child(3)')"
        assert b.eval(f"{cell}.textContent") == "parity run"
        measured = "document.querySelector('#trials tr[data-number=\"0\"] td:nth-child(3)')"
        assert b.eval(f"{measured}.textContent").replace(",", "").isdigit()
        assert list(b.errors) == []


@pytest.mark.browser
def test_the_study_page_says_why_a_tied_faster_config_is_not_recommended(
    sqlite_url: str,
) -> None:
    """8-bit moments 0.6% ahead of fused AdamW, inside the noise, with no trial left for their
    check: the page recommends fused AdamW and names the faster runner-up, and why."""
    from autotuner.executors.replay import Landscape

    db = Database(sqlite_url)
    landscape = Landscape(
        [
            ({"optimizer": "adamw-fused"}, measured(20_000.0, peak_mem_gib=8.0, wall_s=10.0)),
            ({"optimizer": "adamw-8bit"}, measured(20_120.0, peak_mem_gib=7.0, wall_s=10.0)),
        ]
    )
    knobs = {"optimizer": list(OPTIMIZERS)}
    space = parse_space({"name": "tie", "knobs": knobs, "fixed": {"attention": "efficient"}})
    model = ModelSpec.resolve({"preset": "tiny"})
    study_id = create_study(db, model=model, space=space, max_trials=2)
    executor = FakeParityReplay(landscape, list(knobs), target=H200)
    StudyRunner(db, study_id, executor, poll_s=0.0, heartbeat_interval_s=3600).run()
    for base in _serve(make_app(db)):
        with Browser(width=1280, height=900) as b:
            b.open(f"{base}/studies/{study_id}", ready="document.body.dataset.tableView")
            margin = b.eval("document.getElementById('best-margin').textContent")
            assert margin.startswith("Runner-up, trial #"), margin
            assert "0.6% faster, within the noise" in margin, margin
            text = b.eval("document.getElementById('best').textContent")
            assert "(bf16 with 8-bit AdamW moments) ties it within the noise" in text
            assert list(b.errors) == []
