"""The coordinator's own steps on the big study, called as the coordinator calls them: the live
recommendation stored after each finished trial, and the end of the study."""

from __future__ import annotations

import random
import time
from typing import Any

from autotuner.options import StudyOptions
from autotuner.search.objective import Objective
from autotuner.storage.session import Database
from bench.reads_lib.seed import TrialWriter
from bench.reads_lib.service import OWNER, _policy, _quiet, rounded


def measure_live_best(url: str, big: str, trials: int) -> dict[str, Any]:
    """`trials` more trials finished one by one (their two writes timed apart), each followed
    by the step the coordinator takes after a finished trial: the live recommendation stored."""
    from autotuner.study.lifecycle import StudyLease

    db = Database(url)
    lease = StudyLease(db, big, OWNER, ttl_s=600, heartbeat_interval_s=5, on_event=_quiet)
    lease.take()
    writer = TrialWriter(db, big, random.Random(11), lease.owner)
    lease.store_live_best(Objective.TOKENS_PER_S, StudyOptions())  # as at the study's start
    full_before = lease.live.full_computations
    writes, live = [], []
    for _ in range(trials):
        started = time.perf_counter()
        writer.finish_one()
        wrote = time.perf_counter()
        lease.store_live_best(Objective.TOKENS_PER_S, StudyOptions())
        live.append((time.perf_counter() - wrote) * 1000)
        writes.append((wrote - started) * 1000)
    return {
        "store_live_best_ms": rounded(live),
        "trial_writes_ms": rounded(writes),
        "full_computations": lease.live.full_computations - full_before,
        "full_recomputation_ms": round(_full_ms(db, big), 1),
    }


def _full_ms(db: Database, big: str) -> float:
    """The recommendation from every trial, stored (what each finished trial cost before it
    was kept one trial at a time), once."""
    from autotuner.study.live import store_live_best

    started = time.perf_counter()
    store_live_best(db, big, Objective.TOKENS_PER_S, StudyOptions())
    return (time.perf_counter() - started) * 1000


def measure_end_of_study(url: str, big: str) -> dict[str, Any]:
    """The end of the study (its trials read, the recommendation computed, then with no
    transaction open the knob report and the policy's evidence; then stored), as
    `finish.finish` runs it. The evidence's replay is kept up with the ended trials first, as
    the coordinator keeps it after each trial it records (study/end_kept.py): the time a
    coordinator taking over the whole study would spend on it, feed by feed, is reported
    apart (`evidence_catch_up_ms`)."""
    from autotuner.storage.models import StudyStatus
    from autotuner.study.end_kept import CATCH_UP, KeptForEnd
    from autotuner.study.lifecycle import StudyLease

    db = Database(url)
    lease = StudyLease(db, big, OWNER, ttl_s=600, heartbeat_interval_s=5, on_event=_quiet)
    lease.take()
    # As the coordinator keeps them up as trials end: the live recommendation (stored at the
    # study's start and after each finished trial) and what the end reads (below).
    lease.store_live_best(Objective.TOKENS_PER_S, StudyOptions())
    policy = _policy(db, big)
    kept = KeptForEnd(db, big)
    started = time.perf_counter()
    feeds = 0
    while kept.catch_up(policy, CATCH_UP):
        feeds += 1
    catch_up_ms = (time.perf_counter() - started) * 1000
    evidence_ms: list[float] = []

    def evidence(trials: list[Any]) -> dict[str, Any]:
        started = time.perf_counter()
        out: dict[str, Any] = kept.report(policy, trials)
        evidence_ms.append((time.perf_counter() - started) * 1000)
        return out

    started, cpu = time.perf_counter(), time.process_time()
    lease.finish(
        StudyStatus.COMPLETED,
        objective=Objective.TOKENS_PER_S,
        options=StudyOptions(),
        evidence=evidence,
        kept=kept,
    )
    return {
        "end_of_study_ms": round((time.perf_counter() - started) * 1000, 1),
        "end_of_study_cpu_ms": round((time.process_time() - cpu) * 1000, 1),
        "end_of_study_evidence_ms": round(evidence_ms[0], 1) if evidence_ms else None,
        "evidence_catch_up_ms": round(catch_up_ms, 1),
        "evidence_catch_up_feeds": feeds,
    }
