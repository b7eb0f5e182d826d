"""The study page's charts kept per study (dashboard/charts_kept.py, charts.KeptCharts): what a
page shows is `chart_data` over every trial read now, before and after new trials, with trials
running across reads, on a seeded study in Postgres."""

from __future__ import annotations

import random
from typing import Any

from fastapi.testclient import TestClient

from autotuner.dashboard.charts import KeptCharts, chart_data, ended_line
from autotuner.dashboard.charts_kept import KEPT_STUDIES, forget, study_charts
from autotuner.options import StudyOptions
from autotuner.search.objective import Objective
from autotuner.storage.session import Database
from autotuner.study import trial_reads
from autotuner.study.lifecycle import StudyLease
from bench.reads_lib.seed import TrialWriter, seed_study
from bench.reads_lib.service import _quiet
from tests.coordinator.test_end_kept import _finish, _start_one
from tests.dashboard.conftest import make_app


def _full(db: Database, study_id: str) -> dict[str, Any]:
    """The charts computed from every trial's chart row, as the page computed them before they
    were kept, with the line ending on the recommendation's value."""
    detail = trial_reads.get_study_detail(db, study_id, last=0)
    best = detail["best"]["best"]
    return chart_data(detail["chart_rows"], final=best and best.get("tokens_per_s"))


def _page(client: TestClient, study_id: str) -> dict[str, Any]:
    charts: dict[str, Any] = client.get(f"/studies/{study_id}?format=json").json()["charts"]
    return charts


def test_the_kept_charts_are_the_full_computation_as_trials_end(pg_url: str) -> None:
    db = Database(pg_url)
    # 1,500 trials (measured, re-measured, out of memory, timed out, pruned) and 2 running:
    # past 1,000 measured points the progress chart buckets them.
    study_id = seed_study(db, trials=1500, name="kept", rng=random.Random(7), running=2)
    lease = StudyLease(db, study_id, "test", ttl_s=600, heartbeat_interval_s=5, on_event=_quiet)
    lease.take()
    writer = TrialWriter(db, study_id, random.Random(8), lease.owner)
    client = TestClient(make_app(db))

    first = _page(client, study_id)
    assert first == _full(db, study_id)
    assert first["progress"]["shown"] < first["progress"]["measured"]  # bucketed
    assert any(c["measured"] > 150 for s in first["strips"].values() for c in s["cells"])
    # The same version: the charts computed before (the same object), not read again.
    with db.read() as s:
        study, _ = trial_reads.find_study(s, study_id)
        knobs = list(trial_reads.knob_domains(study))
        assert study_charts(s, study, knobs) is study_charts(s, study, knobs)

    rng = random.Random(9)
    held = _start_one(db, study_id, writer, lease.owner)  # runs across the next reads
    seen = [first]
    for step in range(12):
        for _ in range(rng.randint(1, 3)):
            kind = rng.choice(["plain", "plain", "tight", "stopped"])
            if kind == "plain":
                writer.finish_one()
            else:  # tight (not a candidate for the line) or stopped after its first repeats
                _finish(db, study_id, writer, _start_one(db, study_id, writer, lease.owner), kind)
        lease.store_live_best(Objective.TOKENS_PER_S, StudyOptions())  # the line's end
        if step == 6:
            _finish(db, study_id, writer, held)  # the first running trial ends: folded in
        shown = _page(client, study_id)
        assert shown == _full(db, study_id), step
        seen.append(shown)
    # The trials written moved the charts: a kept copy that missed them would have failed.
    assert seen[-1]["progress"]["measured"] > first["progress"]["measured"]
    assert seen[-1]["pareto"]["measured"] > first["pareto"]["measured"]


def _rows(n: int, rng: random.Random) -> list[dict[str, Any]]:
    """Chart rows of every kind: measured, tight, stopped, re-measured, end checks, failed,
    pruned, running; peaks missing on some; a knob that appears only later."""
    rows = []
    for number in range(n):
        state = rng.choices(
            ["complete", "infeasible", "failed", "lost", "pruned", "running"],
            [70, 10, 5, 3, 8, 4],
        )[0]
        params: dict[str, Any] = {"mb": rng.choice([1, 2, 4, 8]), "prec": rng.choice(["a", "b"])}
        if number > n // 2:
            params["late"] = rng.choice(["x", "y"])
        rows.append(
            {
                "number": number,
                "state": state,
                "tokens_per_s": round(rng.uniform(100, 2000), 1) if state == "complete" else None,
                "purpose": rng.choice(["search"] * 8 + ["remeasure", "headroom"]),
                "peak_mem_gib": None if rng.random() < 0.1 else round(rng.uniform(1, 80), 2),
                "candidate": rng.random() > 0.1,
                "params": params,
            }
        )
    return rows


def test_kept_charts_folded_in_any_parts_equal_the_full_computation() -> None:
    rng = random.Random(3)
    rows = _rows(4000, rng)  # past MAX_PARETO_POINTS measured with a peak on the way
    kept = KeptCharts()
    low, thinned = 0, False
    while low < len(rows):
        high = min(len(rows), low + rng.choice([1, 7, 300, 900]))
        kept.fold(rows[low:high])
        low = high
        for tail in (0, 1, 40):
            final = rng.choice([None, 1500.0])
            got = kept.charts(rows[low : low + tail])
            got = {**got, "progress": ended_line(got["progress"], final)}
            assert got == chart_data(rows[: low + tail], final=final), (low, tail)
            thinned |= (
                len(got["pareto"]["others"]) + len(got["pareto"]["front"])
                < (got["pareto"]["measured"])
            )
    assert thinned  # the grid's part was compared too


def _charts_now(db: Database, study_id: str) -> dict[str, Any]:
    with db.read() as s:
        study, _ = trial_reads.find_study(s, study_id)
        return study_charts(s, study, list(trial_reads.knob_domains(study)))


def test_kept_charts_are_out_of_the_collectors_reach_until_dropped(pg_url: str) -> None:
    """A study's kept charts (80 MiB of objects at 50,000 trials) are frozen out of the cyclic
    collector with the charts computed from them, so that no full collection walks them in
    another request (the 200-study list's tail); a new version's trials folded in are frozen
    too; once the study is dropped (past KEPT_STUDIES others viewed), they are freed."""
    import gc
    import weakref

    db = Database(pg_url)
    rng = random.Random(11)
    big = seed_study(db, trials=200, name="big", rng=rng, running=1)
    others = [seed_study(db, trials=5, name=f"other-{i}", rng=rng) for i in range(KEPT_STUDIES)]
    lease = StudyLease(db, big, "test", ttl_s=600, heartbeat_interval_s=5, on_event=_quiet)
    lease.take()
    writer = TrialWriter(db, big, random.Random(12), lease.owner)

    def alive() -> list[KeptCharts]:
        return [o for o in gc.get_objects() if isinstance(o, KeptCharts)]

    gc.unfreeze()
    forget()
    gc.collect()
    assert not alive()
    try:
        charts = _charts_now(db, big)
        tracked = {id(o) for o in gc.get_objects()}
        assert gc.get_freeze_count() > 0
        assert not alive()  # the folded trials: frozen, not walked
        shown = [charts, charts["progress"], charts["strips"], charts["pareto"]]
        assert not any(id(o) in tracked for o in shown)
        gc.unfreeze()
        (kept,) = alive()  # there, and only frozen
        gc.freeze()

        writer.finish_one()  # a new version: its ended trials folded into the same state
        again = _charts_now(db, big)
        assert again is not charts and again["progress"] != charts["progress"]
        tracked = {id(o) for o in gc.get_objects()}
        assert id(kept) not in tracked and id(kept.points[-1]) not in tracked
        assert id(again) not in tracked

        gone = weakref.ref(kept)
        del kept, charts, again
        assert gone() is not None  # still kept
        for other in others:  # the big study is the least recently viewed: dropped
            _charts_now(db, other)
        assert gone() is None  # freed there, not left frozen for good
        gc.unfreeze()
        assert len(alive()) == KEPT_STUDIES  # the others'
    finally:
        forget()
        gc.unfreeze()
