"""The dashboard's views over a real replayed study (SQLite; the statement count and the typed
knob filters also on Postgres): the trials table's server-side sort and filters and their
validation, the CSV/JSON downloads, the per-knob strip data, the compare page and the trial
page's telemetry and predictions."""

from __future__ import annotations

import csv
import io
import random
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from autotuner.dashboard.charts import knob_strips
from autotuner.executors.replay import ReplayExecutor
from autotuner.search.space import parse_space
from autotuner.spec import Fingerprint, ModelSpec, TelemetrySeries
from autotuner.storage.models import TrialState
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study import operations, trial_reads
from autotuner.study.coordinator import StudyRunner, create_study
from autotuner.study.trials_csv import trials_csv
from tests.dashboard.conftest import KNOBS, make_app
from tests.dashboard.test_queries import _counting
from tests.fakes import measured, synthetic_landscape


def _rows(client: TestClient, study_id: str, query: str) -> tuple[list[dict[str, Any]], int]:
    resp = client.get(f"/studies/{study_id}/trial-rows?{query}")
    assert resp.status_code == 200, resp.text
    return resp.json(), int(resp.headers["X-Total-Count"])


# --------------------------------------------------------------------------- sort and filter


def test_rows_sort_by_a_metric_with_the_unmeasured_last(study: tuple[Database, str]) -> None:
    db, study_id = study
    client = TestClient(make_app(db))
    every = trial_reads.list_trials(db, study_id)
    for order in ("desc", "asc"):
        rows, total = _rows(client, study_id, f"sort=tokens_per_s&order={order}")
        assert total == len(rows) == len(every)
        values = [t["tokens_per_s"] for t in rows]
        measured_values = [v for v in values if v is not None]
        assert measured_values == sorted(measured_values, reverse=order == "desc")
        assert values[len(measured_values) :] == [None] * (len(values) - len(measured_values))
    # A knob sorts by its type: micro-batches as numbers (8 < 16 < 128), not as text.
    rows, _ = _rows(client, study_id, "sort=micro_batch_size&order=asc")
    sizes = [t["params"]["micro_batch_size"] for t in rows]
    assert sizes == sorted(sizes) and 128 in sizes and 16 in sizes


def test_rows_filter_by_state_failure_class_and_knob(study: tuple[Database, str]) -> None:
    db, study_id = study
    client = TestClient(make_app(db))
    every = trial_reads.list_trials(db, study_id)

    def expected(keep: Any) -> list[int]:
        return sorted(t["number"] for t in every if keep(t))

    cases = {
        "state=infeasible": lambda t: t["state"] == "infeasible",
        "state=complete,infeasible": lambda t: t["state"] in ("complete", "infeasible"),
        "error_class=oom": lambda t: t["error_class"] == "oom",
        "micro_batch_size=64": lambda t: t["params"]["micro_batch_size"] == 64,
        "precision=bf16&state=complete": lambda t: (
            t["params"]["precision"] == "bf16" and t["state"] == "complete"
        ),
    }
    for query, keep in cases.items():
        rows, total = _rows(client, study_id, query)
        assert sorted(t["number"] for t in rows) == expected(keep), query
        assert total == len(rows)
    assert expected(cases["state=infeasible"]), "the replayed study has failures to filter"
    # Paged: the total is every match, the page `limit` of them from `offset`.
    complete = expected(lambda t: t["state"] == "complete")
    rows, total = _rows(client, study_id, "state=complete&sort=number&order=asc&offset=2&limit=3")
    assert total == len(complete) and [t["number"] for t in rows] == complete[2:5]


def test_bad_sort_or_filter_is_a_400_naming_the_allowed_values(
    study: tuple[Database, str],
) -> None:
    db, study_id = study
    client = TestClient(make_app(db))
    bad = {
        "sort=speed": ["tokens_per_s", "peak_mem_gib", "micro_batch_size"],
        "order=up": ["asc", "desc"],
        "state=done": ["complete", "infeasible", "pruned", "running"],
        "error_class=boom": ["oom", "unsupported", "timeout"],
        "micro_batch_size=7": ["8, 16, 32, 64, 128"],
        "precision=fp64": ["fp32, bf16"],
        "colour=red": ["micro_batch_size", "precision", "state", "error_class"],
    }
    for query, allowed in bad.items():
        for path in ("trial-rows", "trials.csv"):
            resp = client.get(f"/studies/{study_id}/{path}?{query}")
            assert resp.status_code == 400, (query, path)
            detail = resp.json()["detail"]
            assert all(a in detail for a in allowed), (query, detail)
    assert client.get("/studies/st-nope/trial-rows?state=complete").status_code == 404


# --------------------------------------------------------------------------- downloads


def test_csv_download_has_the_filtered_trials_with_knob_columns(
    study: tuple[Database, str],
) -> None:
    db, study_id = study
    client = TestClient(make_app(db))
    resp = client.get(f"/studies/{study_id}/trials.csv?state=infeasible&sort=number&order=asc")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/csv")
    assert resp.headers["content-disposition"] == (f'attachment; filename="{study_id}-trials.csv"')
    table = list(csv.DictReader(io.StringIO(resp.text)))
    failed = [t for t in trial_reads.list_trials(db, study_id) if t["state"] == "infeasible"]
    assert [int(r["number"]) for r in table] == [t["number"] for t in failed]
    first = table[0]
    assert first["state"] == "infeasible" and first["error_class"] == "oom"
    assert first["micro_batch_size"] == str(failed[0]["params"]["micro_batch_size"])
    assert {"tokens_per_s", "peak_mem_gib", "compile_s", "wall_s"} <= set(first)
    everything = client.get(f"/studies/{study_id}/trials.json")
    assert everything.headers["content-disposition"].endswith(f'"{study_id}-trials.json"')
    assert len(everything.json()) == len(trial_reads.list_trials(db, study_id))
    assert client.get(f"/studies/{study_id}/trials.xlsx").status_code == 404


def test_csv_cells_never_start_a_spreadsheet_formula() -> None:
    trial = {
        "number": 3,
        "state": "failed",
        "params": {"precision": "bf16"},
        "error_message": '=HYPERLINK("http://x")',
        "worker": "@node",
        "tokens_per_s": -1.5,
    }
    row = next(csv.DictReader(io.StringIO(trials_csv([trial], ["precision"]))))
    assert row["error_message"].startswith("'=") and row["worker"] == "'@node"
    assert row["tokens_per_s"] == "-1.5"  # a number stays a number
    assert row["mfu"] == ""  # None is an empty cell, not "None"


# --------------------------------------------------------------------------- the per-knob view


def test_strips_sample_each_value_keeping_its_ends_and_count_failures() -> None:
    rng = random.Random(7)
    rows = []
    for number in range(10_000):
        mb = rng.choice([8, 16, 32, 64])
        state = "infeasible" if mb == 64 and number % 3 == 0 else "complete"
        tps = None if state != "complete" else rng.uniform(1_000, 9_000) * mb
        rows.append({"number": number, "state": state, "tokens_per_s": tps, "params": {"mb": mb}})
    rows.append({"number": 10_000, "state": "pruned", "tokens_per_s": None, "params": {"mb": 8}})
    strip = knob_strips(rows, per_value=150)["mb"]
    assert strip["values"] == ["8", "16", "32", "64"]  # numeric order, not "16" < "8"
    for value, cell in zip(strip["values"], strip["cells"], strict=True):
        mine = [r for r in rows if str(r["params"]["mb"]) == value]
        tps = sorted(r["tokens_per_s"] for r in mine if r["state"] == "complete")
        assert len(cell["tps"]) == 150 and cell["measured"] == len(tps)
        assert cell["tps"][0] == round(tps[0]) and cell["tps"][-1] == round(tps[-1])
        assert cell["failed"] == sum(r["state"] == "infeasible" for r in mine)
    assert strip["cells"][3]["failed"] > 0 and strip["cells"][0]["failed"] == 0


def test_study_page_carries_strips_and_the_filter_choices(study: tuple[Database, str]) -> None:
    db, study_id = study
    data = TestClient(make_app(db)).get(f"/studies/{study_id}?format=json").json()
    strips = data["charts"]["strips"]
    assert set(strips) == set(KNOBS)
    assert strips["micro_batch_size"]["values"] == ["8", "16", "32", "64", "128"]
    assert strips["micro_batch_size"]["cells"][-1]["failed"] > 0  # 128 OOMs in both precisions
    assert data["filters"]["knobs"] == KNOBS and "oom" in data["filters"]["error_classes"]


# --------------------------------------------------------------------------- compare


@pytest.fixture
def two_studies(study: tuple[Database, str]) -> tuple[Database, str, str]:
    db, first = study
    knobs = {"micro_batch_size": [8, 16], "precision": ["fp32"]}
    second = create_study(
        db,
        model=ModelSpec.resolve({"preset": "tiny"}),
        space=parse_space({"name": "small", "knobs": knobs}),
        max_trials=3,
        name="fp32-only",
    )
    StudyRunner(db, second, ReplayExecutor(synthetic_landscape(knobs), list(knobs)), poll_s=0).run()
    return db, first, second


def test_compare_shows_both_studies(two_studies: tuple[Database, str, str]) -> None:
    db, a, b = two_studies
    client = TestClient(make_app(db))
    resp = client.get(f"/compare?a={a}&b={b}")
    assert resp.status_code == 200 and f'href="/studies/{a}"' in resp.text
    data = client.get(f"/compare?a={a}&b={b}&format=json").json()
    for key, ref in (("a", a), ("b", b)):
        best = operations.get_best(db, ref)["best"]
        assert data[key]["study"]["id"] == ref
        assert data[key]["best"]["tokens_per_s"] == best["tokens_per_s"]
        assert data[key]["progress"]["best"][-1][1] == best["tokens_per_s"]
    assert data["a"]["best"]["tokens_per_s"] > data["b"]["best"]["tokens_per_s"]  # bf16 wins
    # The studies list's form sends two ticks; it lands on the a/b address.
    picked = client.get(f"/compare?pick={a}&pick={b}", follow_redirects=False)
    assert picked.status_code == 303 and picked.headers["location"] == f"/compare?a={a}&b={b}"


def test_compare_missing_or_unknown_study_is_a_404_page(
    two_studies: tuple[Database, str, str],
) -> None:
    db, a, _ = two_studies
    client = TestClient(make_app(db))
    for query, words in {
        f"a={a}&b=st-nope": ["Study b", "st-nope"],
        f"a=nope&b={a}": ["Study a", "nope"],
        f"a={a}": ["/compare?a=ID&amp;b=ID"],
        "": ["/compare?a=ID&amp;b=ID"],
        f"pick={a}": ["exactly two", "1 ticked"],
    }.items():
        resp = client.get(f"/compare?{query}")
        assert resp.status_code == 404, query
        assert resp.headers["content-type"].startswith("text/html")
        assert all(w in resp.text for w in words), (query, resp.text)
    as_json = client.get(f"/compare?a={a}&b=st-nope&format=json")
    assert as_json.status_code == 404 and "st-nope" in as_json.json()["detail"]


# --------------------------------------------------------------------------- the trial page


def test_trial_predictions_come_from_the_studys_evidence(study: tuple[Database, str]) -> None:
    db, study_id = study
    rec = operations.get_best(db, study_id)["best"]
    memory = {e["trial_number"]: e for e in rec["cost_model"]["trials"]}
    speed = {e["trial_number"]: e for e in rec["throughput_model"]["trials"]}
    number = next(iter(memory.keys() & speed.keys()))
    client = TestClient(make_app(db))
    data = client.get(f"/studies/{study_id}/trials/{number}?format=json").json()
    assert data["predictions"]["memory"] == memory[number]
    assert data["predictions"]["throughput"] == speed[number]
    page = client.get(f"/studies/{study_id}/trials/{number}").text
    assert 'id="predicted-memory"' in page and f"{memory[number]['predicted_gib']:.2f}" in page
    assert f"{memory[number]['rel_error']:+.1%}" in page
    failed = next(t for t in trial_reads.list_trials(db, study_id) if t["state"] == "infeasible")
    data = client.get(f"/studies/{study_id}/trials/{failed['number']}?format=json").json()
    assert data["predictions"]["memory"] is None and "no prediction" in data["predictions"]["note"]


CPU = Fingerprint(
    device_type="cpu",
    device_name="x86_64",
    device_count=1,
    memory_total_gib=16.0,
    torch="2.13.0",
    python="3.11",
    hostname="laptop",
)


def test_a_cpu_trial_says_it_has_no_gpu_telemetry(study: tuple[Database, str]) -> None:
    db, study_id = study
    with db.session() as s:
        trials = TrialRepo(s)
        row = trials.create_running(study_id, params={"micro_batch_size": 8}, config={})
        result = measured(900.0, fingerprint=CPU, memory_kind="cpu_rss", peak_mem_gib=1.0)
        trials.finish(row, TrialState.COMPLETE, result=result, objective_value=900.0)
        number = row.number
    page = TestClient(make_app(db)).get(f"/studies/{study_id}/trials/{number}").text
    assert "no GPU telemetry (CPU trial)" in page and 'id="telemetry-charts"' not in page


def test_telemetry_series_must_be_aligned() -> None:
    TelemetrySeries(t_s=[0.0, 0.1], sm_util_pct=[90.0, None], power_w=[])
    with pytest.raises(ValidationError, match="power_w: 1 samples for 2 times"):
        TelemetrySeries(t_s=[0.0, 0.1], power_w=[400.0])


# --------------------------------------------------------------------------- on Postgres


@pytest.mark.postgres
def test_filtered_pages_cost_two_statements_and_knobs_compare_typed_on_postgres(
    pg_url: str,
) -> None:
    db = Database(pg_url)
    study_id = create_study(
        db,
        model=ModelSpec.resolve({"preset": "tiny"}),
        space=parse_space({"name": "pg", "knobs": KNOBS}),
        max_trials=10,
    )
    StudyRunner(
        db, study_id, ReplayExecutor(synthetic_landscape(KNOBS), list(KNOBS)), poll_s=0
    ).run()
    client = TestClient(make_app(db))
    query = "precision=bf16&micro_batch_size=64&sort=micro_batch_size&order=desc&limit=2"
    with _counting(db) as statements:
        rows, total = _rows(client, study_id, query)
    every = trial_reads.list_trials(db, study_id)
    match = [t for t in every if t["params"] == {"micro_batch_size": 64, "precision": "bf16"}]
    assert total == len(match) and len(rows) == min(2, len(match)) and match
    # The study, the page, the count: none per row.
    assert len([s for s in statements if s.lstrip().upper().startswith("SELECT")]) <= 3
    rows, _ = _rows(client, study_id, "sort=micro_batch_size&order=asc")
    sizes = [t["params"]["micro_batch_size"] for t in rows]
    assert sizes == sorted(sizes)
