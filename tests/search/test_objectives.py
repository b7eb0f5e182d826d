"""Objectives (throughput, per GPU, per dollar, time to train with compile charged), the memory
ceiling as a constraint, and the Pareto set of throughput against memory."""

from __future__ import annotations

import pytest

from autotuner.options import StudyOptions
from autotuner.search.objective import Objective, check_options, objective_value
from autotuner.search.sampler import FEASIBLE
from autotuner.spec import TrialResult, TrialStatus
from autotuner.storage.models import TrialState
from tests.search.conftest import gpt2_space

KNOBS = {
    "micro_batch_size": [16, 32, 64],
    "precision": ["bf16"],
    "attention": ["flash", "math"],
    "compile_mode": ["none", "default"],
}


def _ok(tps: float, compile_s: float = 0.0, peak: float = 10.0) -> TrialResult:
    return TrialResult(
        status=TrialStatus.OK, tokens_per_s=tps, compile_s=compile_s, peak_mem_gib=peak
    )


def test_time_to_train_charges_compile_time_over_the_planned_run() -> None:
    eager, compiled = _ok(100_000.0), _ok(112_000.0, compile_s=60.0)
    short = StudyOptions(planned_tokens=2e7)  # ~3 minutes: a minute of compiling does not pay off
    long = StudyOptions(planned_tokens=1e11)  # ~11 days: it does
    tt = Objective.TIME_TO_TRAIN
    assert objective_value(tt, eager, 1, short) > objective_value(tt, compiled, 1, short)
    assert objective_value(tt, eager, 1, long) < objective_value(tt, compiled, 1, long)
    hours = {"planned_hours": 1.0}
    assert objective_value(tt, compiled, 1, StudyOptions(**hours)) == pytest.approx(
        112_000 * (3600 - 60) / 3600
    )
    assert objective_value(
        Objective.MTOKENS_PER_USD, eager, 2, StudyOptions(usd_per_gpu_hour=2.0)
    ) == (pytest.approx(100_000 / 1e6 / (4.0 / 3600)))
    with pytest.raises(ValueError, match="planned_tokens"):
        check_options(tt, StudyOptions())
    with pytest.raises(ValueError, match="usd_per_gpu_hour"):
        check_options(Objective.MTOKENS_PER_USD, StudyOptions())
    with pytest.raises(ValueError, match="greater than 0"):
        StudyOptions(usd_per_gpu_hour=0)


def test_time_to_train_study_prefers_eager_for_a_short_run(db, run_study) -> None:
    space = gpt2_space(KNOBS)
    short = {"planned_tokens": 2e7, "early_stop_patience": 0}
    _, _, _, rec = run_study(
        db, space=space, landscape=None, trials=12, objective=Objective.TIME_TO_TRAIN, options=short
    )
    assert rec is not None and rec["objective"] == "time_to_train"
    assert rec["params"]["compile_mode"] == "none"
    assert rec["time_to_train_h"] > 0


def test_memory_ceiling_is_a_constraint_and_never_recommended(db, run_study) -> None:
    from tests.search.conftest import gpt2_landscape

    space = gpt2_space(KNOBS)
    _, _, _free, rec_free = run_study(
        db,
        space=space,
        landscape=gpt2_landscape(KNOBS),
        trials=12,
        options={"early_stop_patience": 0},
    )
    assert rec_free is not None and rec_free["peak_mem_gib"] > 15.0
    runner, _, trials, rec = run_study(
        db,
        space=space,
        landscape=gpt2_landscape(KNOBS),
        trials=12,
        options={"max_mem_gib": 15.0, "early_stop_patience": 0},
    )
    assert rec is not None and rec["peak_mem_gib"] <= 15.0
    assert all(p["peak_mem_gib"] <= 15.0 for p in rec["pareto"])
    over = [t for t in trials if t.state == TrialState.COMPLETE and (t.peak_mem_gib or 0) > 15]
    told = {
        str(sorted(ft.params.items())): ft.constraints.get(FEASIBLE) for ft in runner.optuna.trials
    }
    for t in over:
        assert told[str(sorted(t.params.items()))] > 0
    pruned_over = [
        t for t in trials if t.state == TrialState.PRUNED and "ceiling" in (t.error_message or "")
    ]
    assert over or pruned_over


def test_pareto_set_is_non_dominated(db, run_study) -> None:
    _, _, _, rec = run_study(
        db, space=gpt2_space(KNOBS), trials=12, options={"early_stop_patience": 0}
    )
    assert rec is not None
    front = rec["pareto"]
    assert len(front) >= 2
    mems = [p["peak_mem_gib"] for p in front]
    vals = [p["objective_value"] for p in front]
    assert mems == sorted(mems) and vals == sorted(vals)  # more memory buys more throughput
    assert front[-1]["objective_value"] == rec["objective_value"]
