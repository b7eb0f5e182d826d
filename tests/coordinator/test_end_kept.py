"""The end of a study from what the coordinator kept as its trials ended (study/end_kept.py):
the rows and the evidence's replay fed in parts, with a trial running across feeds, give the
rows a read of every trial gives and the recommendation, knob report and evidence of the full
computation, key for key, as lease.finish stores them."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from autotuner.options import StudyOptions
from autotuner.search.evidence_replay import EXACT_REPLAY
from autotuner.search.objective import Objective
from autotuner.spec import TrialConfig
from autotuner.storage.models import Study, StudyStatus, TrialState
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.storage.trial_rows import end_of_study_rows
from autotuner.study.end_kept import KeptForEnd
from autotuner.study.lifecycle import StudyLease
from autotuner.study.measurements import over_memory, stopped_early
from autotuner.study.recommend import knob_importance, recommend_ranked
from bench.reads_lib.seed import TrialWriter, _propose, _result, seed_study
from bench.reads_lib.service import _policy, _quiet

OPTIONS = StudyOptions()


def _full(db: Database, study_id: str, policy: Any) -> dict[str, Any]:
    """The end of the study computed from every trial read now (what lease.finish stored
    before the rows and the replay were kept): a fresh replay of every trial."""
    with db.read() as s:
        trials = end_of_study_rows(s, study_id)
        rec, ranked = recommend_ranked(trials, Objective.TOKENS_PER_S, options=OPTIONS)
        assert rec is not None
        importance = knob_importance(ranked, rec.noise_rel)
        return rec.with_entries(importance=importance, **policy.report(trials)).as_ended().stored()


def _plain(rows: list[Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.__dict__.items() if k != "_session"} for r in rows]


@pytest.mark.parametrize("live", [True, False], ids=["live-kept", "no-live"])
def test_the_kept_end_of_a_study_is_the_full_computation(pg_url: str, live: bool) -> None:
    """`live`: the live recommendation kept as the coordinator keeps it (stored after each
    trial), which the end takes; else the end computes it from the rows."""
    db = Database(pg_url)
    rng = random.Random(42)
    # 700 trials (measured, re-measured, out of memory, timed out, pruned) and 2 running,
    # which the lease marks lost: enough for refits past EXACT_REPLAY while it is fed.
    study_id = seed_study(db, trials=700, name="kept", rng=rng, running=2)
    lease = StudyLease(db, study_id, "test", ttl_s=600, heartbeat_interval_s=5, on_event=_quiet)
    lease.take()
    policy = _policy(db, study_id)
    kept = KeptForEnd(db, study_id)
    writer = TrialWriter(db, study_id, random.Random(5), lease.owner)
    held: int | None = None
    for feed in range(40):
        kept.catch_up(policy, limit=rng.randint(1, 40))
        for _ in range(rng.randint(0, 4)):
            kind = rng.choice(["plain", "plain", "tight", "stopped"])
            if kind == "plain":
                writer.finish_one()
            else:  # kept out of the ranking (less memory free than the headroom), or stopped
                _finish(db, study_id, writer, _start_one(db, study_id, writer, lease.owner), kind)
            if live:
                lease.store_live_best(Objective.TOKENS_PER_S, OPTIONS)
        if feed == 10:  # a trial runs across the next feeds: none passes it until it ends
            held = _start_one(db, study_id, writer, lease.owner)
        if feed == 25:
            while kept.catch_up(policy, limit=rng.randint(1, 40)):
                pass
            assert kept.replay is not None and kept.replay.next == held
            _finish(db, study_id, writer, held)
    assert kept.replay is not None and kept.replay.next > held > EXACT_REPLAY * 2
    writer.finish_one()  # ended after the last feed: read and replayed at the end
    if live:  # as the coordinator stores it after each trial
        lease.store_live_best(Objective.TOKENS_PER_S, OPTIONS)
    with db.read() as s:
        taken = lease.live.current(s, study_id, OPTIONS)
    assert (taken is not None) == live
    assert policy.options == OPTIONS and kept.fitting  # the configs kept are the ones ranked
    kept_out = [t for _, t in kept.keyed if over_memory(t, OPTIONS)]
    assert kept_out and any(stopped_early(t) for _, t in kept.keyed)

    with db.read() as s:
        assert _plain(kept.end_rows(s)) == _plain(end_of_study_rows(s, study_id))
    full = _full(db, study_id, policy)
    assert full["cost_model"]["replay"]["refits"] > EXACT_REPLAY  # refits past the exact part
    assert full["importance"] and full["throughput_model"]["trials"]

    lease.finish(
        StudyStatus.COMPLETED,
        objective=Objective.TOKENS_PER_S,
        options=OPTIONS,
        evidence=lambda trials: kept.report(policy, trials),
        kept=kept,
    )
    with db.read() as s:
        study = s.get(Study, study_id)
        assert study is not None
        stored = study.recommendation
    assert stored == json.loads(json.dumps(full))
    assert kept.replay is None and not kept.rows  # let go once the study ended


def test_a_replay_for_another_policy_starts_over(pg_url: str) -> None:
    """A policy built again (a coordinator that took the study over) is not given the first
    one's replay: the report replays every trial itself, and is the full one."""
    db = Database(pg_url)
    study_id = seed_study(db, trials=150, name="other", rng=random.Random(3))
    first, second = _policy(db, study_id), _policy(db, study_id)
    kept = KeptForEnd(db, study_id)
    kept.catch_up(first, limit=80)
    with db.read() as s:
        trials = end_of_study_rows(s, study_id)
    assert kept.report(second, trials) == second.report(trials) == first.report(trials)


def _start_one(db: Database, study_id: str, writer: TrialWriter, owner: str) -> int:
    params = _propose(writer.space, writer.rng)
    with db.session() as s:
        return (
            TrialRepo(s)
            .create_running(
                study_id, params=params, config=_config(writer, study_id, params), owner=owner
            )
            .number
        )


def _finish(
    db: Database, study_id: str, writer: TrialWriter, number: int, kind: str = "plain"
) -> None:
    with db.session() as s:
        repo = TrialRepo(s)
        row = repo.get(study_id, number)
        assert row is not None
        config = TrialConfig.model_validate(row.config)
        result = _result(row.params, config, writer.rng)
        ok = result.tokens_per_s is not None
        if ok and kind == "tight":
            result = result.model_copy(update={"peak_mem_gib": 128.0, "peak_reserved_gib": 131.0})
        elif ok and kind == "stopped":
            result = result.model_copy(update={"stopped_early": True})
        repo.finish(
            row,
            TrialState.COMPLETE if ok else TrialState.INFEASIBLE,
            result=result,
            objective_value=result.tokens_per_s,
            owner=writer.owner,
        )


def _config(writer: TrialWriter, study_id: str, params: dict[str, Any]) -> dict[str, Any]:
    knobs = writer.space.knobs_for(params, writer.model, 1)
    return TrialConfig(
        study_id=study_id,
        trial_number=0,
        model=writer.model,
        knobs=knobs,
        measure=writer.space.measure,
        num_gpus=1,
    ).model_dump(mode="json")
