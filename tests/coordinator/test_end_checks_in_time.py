"""With a time budget, the end checks run inside it (issue 10, item 5).

A study on a fake H200 (fp8 is GPU-only: tests/fakes.py) whose trials take their recorded walls
of real time (`PacedExecutor`), long against the budget as a compiled Llama 3B trial is against
8 minutes. The fp8 winner's numerics check must run before the budget ends: the search stops
early for it and says so, and the re-measurements that would crowd it out are cut."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from autotuner.executors.base import Target
from autotuner.executors.replay import Landscape
from autotuner.purpose import SEARCH_TRIALS
from autotuner.search.numerics import runs_parity_steps
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.models import TrialState
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import Event, StudyRunner, create_study
from tests.fakes import FAKE_GPU, FakeParityReplay, PacedExecutor, measured

# About 30 s of real time, nearly all of it waiting, against budgets of seconds: alone.
pytestmark = [pytest.mark.slow, pytest.mark.timing]

H200 = Target("cuda", 1, "replay", (9, 0), 80.0)
KNOBS: dict[str, list[Any]] = {
    "micro_batch_size": [2, 4, 8, 16, 32, 64],
    "precision": ["bf16", "fp8-tensorwise"],
    "checkpointing": ["none", "full"],
}
BUDGET_MIN = 0.5
# Seconds per trial: fp8 compiles take longer, as on the H200 (80-190 s there, in minutes).
WALL_S = {"bf16": 2.0, "fp8-tensorwise": 3.0}
PARITY_WALL_S = 3.0


def landscape() -> Landscape:
    """fp8 is fastest; larger micro-batches a little faster; full checkpointing slower."""
    entries = []
    for mb in KNOBS["micro_batch_size"]:
        for precision in KNOBS["precision"]:
            for ckpt in KNOBS["checkpointing"]:
                tps = 10_000.0 * (2.0 if precision == "bf16" else 2.4) * (1 + mb / 1000)
                tps *= 0.75 if ckpt == "full" else 1.0
                p = {"micro_batch_size": mb, "precision": precision, "checkpointing": ckpt}
                result = measured(
                    tps,
                    peak_mem_gib=mb / 4,
                    fingerprint=FAKE_GPU,
                    wall_s=WALL_S[precision],
                    step_time_s=0.01,
                )
                entries.append((p, result))
    return Landscape(entries)


def test_the_numerics_check_runs_inside_the_time_budget(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    space = parse_space({"name": "timed", "knobs": KNOBS, "fixed": {"attention": "efficient"}})
    study_id = create_study(
        db,
        model=ModelSpec.resolve({"preset": "tiny"}),
        space=space,
        max_minutes=BUDGET_MIN,
    )
    replay = FakeParityReplay(landscape(), list(KNOBS), target=H200, parity_wall_s=PARITY_WALL_S)
    events: list[Event] = []
    runner = StudyRunner(
        db,
        study_id,
        PacedExecutor(replay),
        poll_s=0.05,
        heartbeat_interval_s=3600,
        on_event=events.append,
    )
    runner.run()

    with db.read() as s:
        study = StudyRepo(s).require(study_id)
        trials = TrialRepo(s).list(study_id)
        rec = study.recommendation
    assert rec is not None and study.status == "completed"
    # The winner is fp8, and its numerics check ran, complete: the reference's parity trial,
    # then the candidate's steps inside its headroom check (one process for both checks).
    assert rec["knobs"]["precision"] == "fp8-tensorwise"
    parity = [t for t in trials if t.purpose == "parity-ref" or runs_parity_steps(t)]
    assert [t.purpose for t in parity] == ["parity-ref", "headroom"], [t.purpose for t in trials]
    assert all(t.state == TrialState.COMPLETE for t in parity)
    assert rec["numerics"]["checked"] and rec["numerics"]["passed"], rec["numerics"]["text"]
    # ... inside the budget: every trial finished before it ended (a little slack for the
    # coordinator's polling, none for another trial).
    end = _utc(study.started_at) + dt.timedelta(minutes=BUDGET_MIN, seconds=0.5)
    last = max(_utc(t.finished_at) for t in trials if t.finished_at is not None)
    assert last <= end, f"the last trial ended {(last - end).total_seconds():.1f} s late"
    # The search stopped early for it and said so, in the events and the evidence.
    said = [e.message for e in events if e.kind == "search_over"]
    assert len(said) == 1 and said[0] is not None
    assert said[0].startswith("search stopped at") and "numerics check" in said[0]
    assert "to leave time for the end checks" in said[0]
    assert rec["stopped"].startswith(said[0])
    stop_at = next(t.number for t in trials if t.purpose not in SEARCH_TRIALS)
    searched = [t for t in trials if t.purpose in SEARCH_TRIALS]
    assert all(t.number < stop_at for t in searched)
    # The search ran until then, not only the seeds: the time was used.
    assert len(searched) >= 4


def test_without_a_numerics_change_the_search_keeps_its_time(sqlite_url: str) -> None:
    """A bf16-only space has no numerics check due: only the headroom check is kept, so
    the search runs longer than with fp8's three checks."""
    db = Database(sqlite_url)
    knobs = {**KNOBS, "precision": ["bf16"]}
    space = parse_space({"name": "timed", "knobs": knobs, "fixed": {"attention": "efficient"}})
    study_id = create_study(
        db, model=ModelSpec.resolve({"preset": "tiny"}), space=space, max_minutes=0.25
    )
    replay = FakeParityReplay(landscape(), list(knobs), target=H200)
    events: list[Event] = []
    StudyRunner(
        db, study_id, PacedExecutor(replay), poll_s=0.05, heartbeat_interval_s=3600,
        on_event=events.append,
    ).run()  # fmt: skip
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
        study = StudyRepo(s).require(study_id)
    assert not [t for t in trials if t.purpose in ("parity-ref", "parity")]
    headroom = [t for t in trials if t.purpose == "headroom"]
    assert len(headroom) == 1 and headroom[0].state == TrialState.COMPLETE
    end = _utc(study.started_at) + dt.timedelta(minutes=0.25, seconds=0.5)
    assert max(_utc(t.finished_at) for t in trials if t.finished_at) <= end
    # The search ends either to leave time for the end checks, which then name the headroom
    # check alone, or (on a loaded machine, trials a little slower) when its next proposal and
    # the end checks no longer fit: either way no numerics check was counted.
    said = [e.message or "" for e in events if e.kind == "search_over"]
    assert len(said) == 1 and "numerics" not in said[0], said
    assert "the headroom check" in said[0] or said[0].startswith("not launched for time"), said


def _utc(when: dt.datetime | None) -> dt.datetime:
    assert when is not None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def test_a_trial_that_would_compile_past_the_budget_is_not_launched(sqlite_url: str) -> None:
    """max-autotune compiles 11x longer than the default mode (on the H200 it was still
    compiling after 240 s where the default took 25 s). Near the end of the budget such a
    proposal is not launched; cheaper ones still are, and the study ends inside its budget."""
    knobs: dict[str, list[Any]] = {
        "micro_batch_size": [2, 4, 8, 16, 32, 64],
        "compile_mode": ["default", "max-autotune-no-cudagraphs"],
    }
    walls = {"default": (1.0, 0.5), "max-autotune-no-cudagraphs": (6.0, 5.5)}
    entries = []
    for mb in knobs["micro_batch_size"]:
        for mode in knobs["compile_mode"]:
            wall, compile_s = walls[mode]
            # Slower here, so the winner's headroom check re-runs a default-mode config (this
            # fake re-runs at the recorded wall; a real re-run compiles warm).
            tps = 10_000.0 * (1.1 if mode == "default" else 0.9) * (1 + mb / 1000)
            p = {"micro_batch_size": mb, "compile_mode": mode}
            entries.append(
                (p, measured(tps, peak_mem_gib=mb / 4, fingerprint=FAKE_GPU, wall_s=wall,
                             compile_s=compile_s, step_time_s=0.01))
            )  # fmt: skip
    db = Database(sqlite_url)
    space = parse_space({"name": "timed", "knobs": knobs, "fixed": {"attention": "efficient"}})
    budget_min = 0.3  # 18 s
    study_id = create_study(
        db, model=ModelSpec.resolve({"preset": "tiny"}), space=space, max_minutes=budget_min
    )
    replay = FakeParityReplay(Landscape(entries), list(knobs), target=H200)
    events: list[Event] = []
    # Seeds in this order: a max-autotune trial early (it runs) and one late, after five
    # default ones, when the 6 s it takes and the end check after it no longer fit.
    autotune = "max-autotune-no-cudagraphs"
    order = [("default", 2), (autotune, 2), *[("default", mb) for mb in (4, 8, 16, 32)]]
    order.append((autotune, 64))
    seeds = [{"micro_batch_size": mb, "compile_mode": mode} for mode, mb in order]
    runner = StudyRunner(
        db, study_id, PacedExecutor(replay), poll_s=0.05, heartbeat_interval_s=3600,
        on_event=events.append, seeds=lambda _: seeds,
    )  # fmt: skip
    runner.run()
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
        study = StudyRepo(s).require(study_id)
    end = _utc(study.started_at) + dt.timedelta(minutes=budget_min, seconds=0.5)
    last = max(_utc(t.finished_at) for t in trials if t.finished_at is not None)
    assert last <= end, f"the last trial ended {(last - end).total_seconds():.1f} s late"
    ran = [t.params for t in trials if t.purpose in SEARCH_TRIALS]
    # Each search trial could compile only while the study had time left for it, the end
    # checks kept; the end checks themselves run to their end.
    budgets = [
        t.config["measure"]["compile_budget_s"] for t in trials if t.purpose in SEARCH_TRIALS
    ]
    assert budgets and all(0 < b <= budget_min * 60 for b in budgets), budgets
    assert budgets == sorted(budgets, reverse=True)  # less and less time left
    checks = [t for t in trials if t.purpose == "headroom"]
    assert checks and all(t.config["measure"].get("compile_budget_s") is None for t in checks)
    assert seeds[1] in ran  # early on, it ran
    assert seeds[-1] not in ran  # late, it did not
    assert runner.policy.late >= 1
    said = [e.message or "" for e in events if e.kind == "search_over"]
    assert any(m.startswith("not launched for time: a bf16 compile max-autotune") for m in said)
    assert study.recommendation is not None
    assert "not launched for time" in study.recommendation["stopped"]


def test_a_study_that_ran_past_its_budget_says_so(sqlite_url: str) -> None:
    """`--minutes` stops launching; a trial launched before the end runs to its end. A study
    that ended well past its budget says by how much (the H200's 10-minute Llama 3B study
    ended at 11.9 minutes without saying so)."""
    db = Database(sqlite_url)
    knobs: dict[str, list[Any]] = {"micro_batch_size": [8]}
    space = parse_space({"name": "timed", "knobs": knobs, "fixed": {"attention": "efficient"}})
    study_id = create_study(
        db, model=ModelSpec.resolve({"preset": "tiny"}), space=space, max_minutes=0.05
    )
    result = measured(1000.0, peak_mem_gib=1.0, fingerprint=FAKE_GPU, wall_s=9.0)
    replay = FakeParityReplay(
        Landscape([({"micro_batch_size": 8}, result)]), list(knobs), target=H200
    )
    StudyRunner(db, study_id, PacedExecutor(replay), poll_s=0.05, heartbeat_interval_s=3600).run()
    with db.read() as s:
        rec = StudyRepo(s).require(study_id).recommendation
    assert rec is not None
    assert (
        "; the study ran 9 s of its 3 s: trials launched before the budget ended" in rec["stopped"]
    )
