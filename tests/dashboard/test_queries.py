"""The studies list costs a constant number of SQL statements, however many studies there are.

Counted on the real Postgres with a `before_cursor_execute` listener on the engine, for the
dashboard's page (HTML and JSON, filtered or not) and `operations.list_studies`, which it and
/api/studies call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from autotuner.purpose import Purpose
from autotuner.search.space import parse_space
from autotuner.spec import FailureClass, ModelSpec, TrialResult
from autotuner.storage.models import Study, TrialState
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study import operations, trial_reads
from autotuner.study.coordinator import create_study
from tests.dashboard.conftest import KNOBS, make_app
from tests.fakes import measured

pytestmark = pytest.mark.postgres


@contextmanager
def _counting(db: Database) -> Iterator[list[str]]:
    statements: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(db.engine, "before_cursor_execute", record)


def _add_studies(db: Database, n: int) -> None:
    space = parse_space({"name": "count", "knobs": KNOBS})
    for i in range(n):
        study_id = create_study(
            db, model=ModelSpec.resolve({"preset": "tiny"}), space=space, max_trials=5
        )
        with db.session() as s:
            for _ in range(i % 3):  # 0, 1 or 2 trials each
                TrialRepo(s).create_pruned(
                    study_id, params={}, config={}, error_class="oom", error_message="test"
                )


FILTERED = "/?status=queued,running&q=TIN&family=gpt2"  # _add_studies: queued, preset tiny


def test_studies_list_runs_a_constant_number_of_statements(pg_url: str) -> None:
    db = Database(pg_url)
    client = TestClient(make_app(db))
    reads: dict[str, Callable[[], object]] = {
        "page": lambda: client.get("/").raise_for_status(),
        "page json": lambda: client.get("/?format=json").raise_for_status(),
        # Every filter of the list, in the same statement (study/study_query.py).
        "page filtered": lambda: client.get(FILTERED).raise_for_status(),
        "operation": lambda: operations.list_studies(db, limit=200),
    }

    def count() -> dict[str, int]:
        out = {}
        for name, read in reads.items():
            with _counting(db) as statements:
                read()
            out[name] = len(statements)
        return out

    _add_studies(db, 1)
    one = count()
    _add_studies(db, 29)
    thirty = count()
    assert len(client.get("/?format=json").json()["studies"]) == 30
    assert len(client.get(FILTERED + "&format=json").json()["studies"]) == 30
    assert one == thirty, f"statements for 1 study: {one}, for 30: {thirty}"
    assert max(thirty.values()) <= 3, thirty


# --------------------------------------------------------------------------- one big study

LIMIT_GIB = 80.0


def _study_of(db: Database, n: int) -> str:
    """A study of `n` trials shaped like a long real one: the expert default, distinct search
    configs (a tenth out of memory, some pruned, some tight, two global batches, loader data
    with the winner waiting for its batches), two re-measurements of the top two, and the winner's
    headroom check. Each trial is written as the coordinator writes it (TrialRepo)."""
    space = parse_space({"name": "count", "knobs": KNOBS})
    study_id = create_study(
        db, model=ModelSpec.resolve({"preset": "tiny"}), space=space, max_trials=n + 8
    )

    def config(mb: int, workers: int) -> dict[str, object]:
        knobs = {"micro_batch_size": mb, "grad_accum": 1 + mb % 2, "loader_workers": workers}
        return {"knobs": knobs, "model": {"seq_len": 64}, "num_gpus": 1}

    def result(mb: int, *, check: bool = False) -> object:
        tps = 1000.0 + mb + (500.0 if mb == 3 else 0.0)  # mb 3 wins, mb 2 is the runner-up
        need = 0.97 if mb == n - 1 else 0.5  # the fastest search config of all is tight
        extra = {"peak_mem_with_eval_ckpt_gib": 41.0} if check else {}
        return measured(
            tps + (2000.0 if mb == n - 1 else 0.0),
            peak_mem_gib=LIMIT_GIB * need * 0.9,
            peak_reserved_gib=LIMIT_GIB * need - 0.6,
            memory_kind="cuda",
            memory_limit_gib=LIMIT_GIB,
            tokens_per_step=64 * mb * (1 + mb % 2),
            input_wait_share=0.3 if mb == 3 else 0.01 * (mb % 5),
            **extra,
        )

    with db.session() as s:
        repo = TrialRepo(s)
        plan = [(mb, Purpose.EXPERT_DEFAULT if mb == 1 else "search") for mb in range(1, n)]
        plan += [(3, "remeasure"), (2, "remeasure"), (3, "remeasure"), (2, "remeasure")]
        plan += [(3, "headroom")]
        for mb, purpose in plan:
            params = {"micro_batch_size": mb, "loader_workers": 2 + mb % 3}
            cfg = config(mb, 2 + mb % 3)
            if purpose == "search" and mb % 7 == 0:
                repo.create_pruned(
                    study_id, params=params, config=cfg, error_class="oom", error_message="p"
                )
                continue
            t = repo.create_running(study_id, params=params, config=cfg, purpose=purpose)
            if purpose == "search" and mb % 10 == 0:
                oom = TrialResult.failure(FailureClass.OOM, "CUDA out of memory", wall_s=1.0)
                repo.finish(t, TrialState.INFEASIBLE, result=oom)
                continue
            r = result(mb, check=purpose == "headroom")
            repo.finish(t, TrialState.COMPLETE, result=r, objective_value=r.tokens_per_s)
    return study_id


def test_a_studys_reads_run_a_constant_number_of_statements(pg_url: str) -> None:
    """The recommendation (live and stored), /best, a trial page, the study page and its poll
    cost the same statements for a study of 50 trials as for one of 500: nothing is read
    row by row (a deferred config or result read per trial was one SELECT each)."""
    from autotuner.options import StudyOptions
    from autotuner.search.objective import Objective
    from autotuner.storage.models import StudyStatus
    from autotuner.study.lifecycle import StudyLease
    from autotuner.study.live import live_best, store_live_best

    db = Database(pg_url)
    client = TestClient(make_app(db))

    def count(study_id: str) -> dict[str, int]:
        reads: dict[str, Callable[[], object]] = {
            "live recommendation": lambda: live_best(db, study_id, Objective.TOKENS_PER_S),
            "store it": lambda: store_live_best(db, study_id, Objective.TOKENS_PER_S),
            "best": lambda: operations.get_best(db, study_id),
            "best re-judged": lambda: operations.get_best(db, study_id, headroom=0.02),
            "trial page": lambda: trial_reads.list_trials(db, study_id, after=-1, limit=500),
            "study page": lambda: client.get(f"/studies/{study_id}").raise_for_status(),
            "study page json": lambda: client.get(
                f"/studies/{study_id}?format=json"
            ).raise_for_status(),
            # Last: the study is over after it. Its evidence is computed from the rows read.
            "end of study": lambda: lease.finish(
                StudyStatus.COMPLETED,
                objective=Objective.TOKENS_PER_S,
                options=StudyOptions(),
                evidence=lambda trials: {"rows": len(trials)},
            ),
        }
        lease = StudyLease(
            db, study_id, "counter", ttl_s=60, heartbeat_interval_s=5, on_event=print
        )
        lease.take()
        out = {}
        for name, read in reads.items():
            with _counting(db) as statements:
                read()
            out[name] = len(statements)
        return out

    small, big = _study_of(db, 50), _study_of(db, 500)
    rec = live_best(db, big, Objective.TOKENS_PER_S)
    # Every entry that reads per-trial data ran: the global batches differ, the winner waits
    # for its batches and another loader setting waited less, a faster config is tight.
    assert rec is not None and rec["params"]["micro_batch_size"] == 3
    assert not rec["global_batch"]["same_for_all"]
    assert rec["input_pipeline"]["bottleneck"] and rec["input_pipeline"]["fix"] is not None
    assert [p["why"] for p in rec["headroom"]["passed_over"]] == [
        "leaves 3.0% free, less than the 10% headroom"
    ]
    assert rec["headroom"]["check"]["state"] == "passed"
    fifty, five_hundred = count(small), count(big)
    assert fifty == five_hundred, f"50 trials: {fifty}; 500 trials: {five_hundred}"
    # A handful each (the end of study's 10: its reads, then the study row's write).
    assert max(five_hundred.values()) <= 10, str(five_hundred)
    final = operations.get_best(db, big)["best"]
    assert final["trial_number"] == rec["trial_number"] and "importance" in final
    assert final["rows"] == 504 and final["global_batch"] == rec["global_batch"]


def test_best_and_its_re_judging_read_in_one_transaction(pg_url: str) -> None:
    """`best` (with --headroom: the recommendation re-judged) reads the study and its trials
    in one read transaction on one connection, not a second one opened inside the first."""
    db = Database(pg_url)
    study_id = _study_of(db, 50)
    for headroom in (None, 0.02):
        checkouts: list[object] = []

        def checkout(*args: object, out: list[object] = checkouts) -> None:
            out.append(args)

        event.listen(db.engine, "checkout", checkout)
        try:
            view = operations.get_best(db, study_id, headroom=headroom)
        finally:
            event.remove(db.engine, "checkout", checkout)
        assert len(checkouts) == 1, f"headroom {headroom}: {len(checkouts)} connections"
        best = view["best"]
        assert best is not None and ("rejudged" in best) == (headroom is not None)
    # At 2% the config the study's 10% passed over (3.0% free) is no longer tight: it wins.
    assert view["best"]["headroom"]["passed_over"] == []


def test_trial_lists_read_rows_that_say_what_the_trials_say(pg_url: str) -> None:
    """The lists read plain column rows (study/trial_list.py); each view equals the one built
    from the ORM trial with its JSON loaded (views.trial_view): tight, free memory, global
    batch and params included. The API's page is the same JSON, encoded once."""
    import orjson

    from autotuner.study.views import trial_view

    db = Database(pg_url)
    study_id = _study_of(db, 40)
    listed = trial_reads.list_trials(db, study_id)
    with db.read() as s:
        study = s.get(Study, study_id)
        assert study is not None
        trials = TrialRepo(s).list(study_id)
        built = [trial_view(t, options=study.options) for t in trials]
    assert listed == built
    assert [t["number"] for t in listed] == sorted(t["number"] for t in listed)
    # Every branch of the view ran: a tight trial, free memory on the GPU, none for a pruned one.
    assert [t["number"] for t in listed if t["tight"]] == [
        t.number for t in trials if t.params["micro_batch_size"] == 39
    ]
    assert any(t["memory_free_rel"] for t in listed)
    assert all(t["memory_free_rel"] is None for t in listed if t["state"] == "pruned")
    page = trial_reads.trial_page_json(db, study_id, after=9, limit=5)
    assert orjson.loads(page) == listed[10:15]
