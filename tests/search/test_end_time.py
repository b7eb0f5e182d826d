"""The time the end of a study keeps (search/end_time.py): each end check expected to take the
measured wall of the config it re-runs, compile included; the search stops when the time left
is that plus one search trial; re-measurements never crowd out the checks."""

from __future__ import annotations

from typing import Any

import pytest

from autotuner.options import StudyOptions
from autotuner.search.end_time import (
    CHECKPOINT_BYTES_PER_S,
    END_GRACE_SHARE,
    EVAL_COMPILE_SHARE,
    FLOOR_S,
    MARGIN,
    RECOMPUTE_WARM_SHARE,
    SEARCH_TIME_SHARE,
    WARM_COMPILE_SHARE,
    DueCheck,
    TimeLeft,
    TrialWalls,
    checks_cut,
    checks_stop,
    remeasure_cut,
    share_stop,
)
from autotuner.search.numerics import PARITY_STEPS
from autotuner.search.objective import Objective
from autotuner.search.progress import Progress
from autotuner.search.remeasure import Remeasure
from tests.fakes import measured

BF16 = {"precision": "bf16", "micro_batch_size": 8}
FP8 = {"precision": "fp8-tensorwise", "micro_batch_size": 8}


def _walls(*trials: tuple[dict[str, Any], float, str]) -> TrialWalls:
    walls = TrialWalls()
    for params, wall_s, purpose in trials:
        phases = {"build": 5.0, "first_step": wall_s - 25.0, "warmup": 8.0, "measure": 10.0}
        walls.observe(
            params, measured(1000.0, wall_s=wall_s, step_time_s=1.0, phases_s=phases), purpose
        )
    return walls


def test_a_rerun_takes_its_configs_longest_wall_compile_included() -> None:
    # The first fp8 trial compiled cold (190 s); a re-measurement hit the cache (90 s).
    walls = _walls((BF16, 80.0, "seed"), (FP8, 190.0, "seed"), (FP8, 90.0, "remeasure"))
    assert walls.rerun_s(FP8) == 190.0
    assert walls.search_trial_s() == (80.0 + 190.0) / 2  # re-measurements are not searched
    # Never seen: a search trial's length; nothing measured yet: the floor.
    assert walls.rerun_s({"precision": "fp16", "micro_batch_size": 8}) == 135.0
    assert TrialWalls().rerun_s(FP8) == FLOOR_S
    # A parity trial: no warm-up, no timed repeats (18 s), PARITY_STEPS steps at 1 s each.
    assert walls.parity_s(FP8) == 190.0 - 18.0 + PARITY_STEPS * 1.0
    # End checks (a parity trial, a proxy) teach nothing about a config's trial.
    walls.observe(FP8, measured(1.0, wall_s=999.0), "parity")
    walls.observe(FP8, measured(1.0, wall_s=999.0), "proxy")
    assert walls.rerun_s(FP8) == 190.0


def test_the_search_stops_when_the_time_left_is_the_checks_and_one_trial() -> None:
    walls = _walls((BF16, 60.0, "seed"), (FP8, 100.0, "seed"))
    checks = walls.due([("headroom", FP8), ("parity-ref", FP8), ("parity", FP8)])
    assert [c.expected_s for c in checks] == [100.0, 132.0, 132.0]
    keep = MARGIN * 364.0 + 80.0  # the checks, then a search trial launched now
    assert checks_stop(TimeLeft(900 - keep - 1, 900), checks, walls) is None
    why = checks_stop(TimeLeft(900 - keep + 1, 900), checks, walls)
    assert why is not None and why.startswith("search stopped at 6.4 min of 15.0 min")
    assert "the headroom check 100 s, the numerics check's reference 2.2 min" in why
    # Nothing due: the search runs to the share of the budget kept for re-measuring.
    assert checks_stop(TimeLeft(400, 480), [], walls) is None
    assert share_stop(TimeLeft(400, 480), reserves_share=True) is None
    late = share_stop(TimeLeft(480 * SEARCH_TIME_SHARE, 480), reserves_share=True)
    assert late is not None and "re-measuring the top candidates" in late
    assert share_stop(TimeLeft(470, 480), reserves_share=False) is None


def test_a_remeasurement_runs_only_if_the_checks_still_fit_after_it() -> None:
    rerun = DueCheck("remeasure", FP8, 100.0)
    checks = [DueCheck("headroom", FP8, 100.0)]
    assert remeasure_cut(TimeLeft(0, 100.0 + MARGIN * 100.0), rerun, checks, 1, 4) is None
    why = remeasure_cut(TimeLeft(1, 100.0 + MARGIN * 100.0), rerun, checks, 1, 4)
    assert why is not None and why.startswith("re-measurement stopped after 1 of 4")
    assert "the headroom check 100 s" in why
    # After a search stopped for the same checks (which it described), the cut says only what
    # it adds: the recommendation's `stopped` reads both, and read the checks twice.
    after = remeasure_cut(
        TimeLeft(1, 100.0 + MARGIN * 100.0), rerun, checks, 1, 4, checks_said=True
    )
    assert after is not None and "for the same end checks: the next takes 100 s" in after
    assert "headroom" not in after
    # With no check due, the re-measurement itself must still end inside the budget (one
    # started with 1 s left ran past it).
    assert remeasure_cut(TimeLeft(380, 480), rerun, [], 1, 4) is None
    alone = remeasure_cut(TimeLeft(381, 480), rerun, [], 1, 4)
    assert alone is not None and "the next takes 100 s, with 99 s left" in alone


def test_end_checks_start_only_if_they_end_within_the_grace_past_the_budget() -> None:
    checks = [DueCheck("parity-ref", FP8, 200.0), DueCheck("headroom+parity", FP8, 160.0)]
    grace = END_GRACE_SHARE * 600
    # 360 s of checks: started with 360 s left, or up to the grace less, they run.
    assert checks_cut(TimeLeft(240, 600), checks) is None
    assert checks_cut(TimeLeft(240 + grace, 600), checks) is None
    why = checks_cut(TimeLeft(241 + grace, 600), checks)
    assert why is not None and why.startswith("end checks not started at")
    assert "they would end 61 s past the time budget" in why
    assert "(the numerics check's reference 3.3 min, the headroom and numerics check" in why
    assert checks_cut(TimeLeft(599, 600), []) is None  # nothing due: nothing to cut


def test_the_checks_due_follow_the_best_config_so_far() -> None:
    progress = Progress(objective=Objective.TOKENS_PER_S, gpus=1, options=StudyOptions())
    remeasure = Remeasure(top=2, rounds=2, parity=True, headroom=True)
    fp8 = lambda p: p["precision"] == "fp8-tensorwise"  # noqa: E731
    assert remeasure.checks_due(progress, None, fp8) == []  # nothing measured: nothing to check
    progress.observe(BF16, measured(1000.0), "seed")
    assert remeasure.checks_due(progress, None, fp8) == [("headroom", BF16)]
    progress.observe(FP8, measured(1500.0), "search")
    due = remeasure.checks_due(progress, None, fp8)
    # The reference, then the headroom check that runs the candidate's parity steps too.
    assert due == [("parity-ref", FP8), ("headroom+parity", FP8)]
    # Without a headroom check the candidate's steps are a parity trial of their own.
    alone = Remeasure(top=2, rounds=2, parity=True, headroom=False)
    assert alone.checks_due(progress, None, fp8) == [("parity-ref", FP8), ("parity", FP8)]
    # The same trials kept for the end: the headroom check and the reference, or the two
    # parity trials (and the four re-measurements either way).
    assert remeasure.reserve(None) == alone.reserve(None) == 4 + 2
    # A trial budget of four keeps none (they are for the search), as its trial reserve does.
    assert remeasure.checks_due(progress, 4, fp8) == []


def _llama_3b_fp8(**extra: Any) -> Any:
    """The Llama 3B fp8 seed of the H200's 10-minute study: 170.7 s, 157.3 s of it compiling
    cold, 4 micro-batches per step (bench/results/h200_session_20261201)."""
    phases = {"build": 5.4, "warmup": 3.2, "first_step": 158.3, "measure": 3.2, "checks": 0.0}
    return measured(
        30_602.0, wall_s=170.7, compile_s=157.3, step_time_s=1.07, phases_s=phases, **extra
    )


def test_a_rerun_compiles_warm_as_the_study_measured_it() -> None:
    walls = TrialWalls()
    walls.observe(FP8, _llama_3b_fp8(), "seed", grad_accum=4)
    # Before any re-run: the prior share of the cold compile.
    assert walls.warm_share(FP8) == WARM_COMPILE_SHARE
    assert walls.rerun_s(FP8) == 170.7 - 157.3 * (1 - WARM_COMPILE_SHARE)
    expected_headroom = walls.rerun_s(FP8) + EVAL_COMPILE_SHARE * 157.3
    assert walls.headroom_s(FP8) == expected_headroom  # no parameter count: no save counted
    # Its headroom check: 53.2 s of warm compile, 141 s of evaluation and checkpoint.
    check = measured(
        30_616.0, wall_s=206.3, compile_s=53.2, phases_s={"checks": 141.0, "first_step": 54.2}
    )
    walls.observe(FP8, check, "headroom")
    share = 53.2 / 157.3
    assert walls.warm_share(FP8) == share
    assert walls.rerun_s(FP8) == 170.7 - 157.3 * (1 - share)
    assert walls.headroom_s(FP8) == walls.rerun_s(FP8) + 141.0
    # A parity trial: warm, no warm-up or timed repeats, 50 steps of one micro-batch.
    parity = 170.7 - 157.3 * (1 - share) - (3.2 + 3.2 + 0.0) + PARITY_STEPS * 1.07 / 4
    assert walls.parity_s(FP8) == parity
    due = walls.due([("headroom", FP8), ("parity-ref", FP8), ("parity", FP8)])
    # 12.1 min was expected with cold walls; 7.3 min is what these checks take now.
    assert sum(c.expected_s for c in due) < 0.65 * (170.7 + 2 * (170.7 - 6.4 + 50 * 1.07))
    # The longest wall stays the cold one: a warm re-run does not shorten the next estimate.
    walls.observe(FP8, measured(30_600.0, wall_s=60.0, compile_s=50.0), "remeasure")
    assert walls.rerun_s(FP8) == 170.7 - 157.3 * (1 - share)


def test_before_any_check_the_save_is_counted_from_the_parameters() -> None:
    """The 10-minute Llama 3B study of 2026-12-04 (seventh; bench/results/h200_session_20261204g):
    its fp8 winner's first trial took 158.8 s, 142.7 s compiling cold, at 32,768 tokens a step
    in two micro-batches; its headroom and numerics check took 193.2 s (warm compile 51.7 s,
    parity steps 76.2 s, evaluation 73.2 s, checkpoint save 28.6 s). Without the save in the
    prior, and the evaluation at 0.35 of the compile, it was expected at 154 s."""
    walls = TrialWalls()
    first = measured(
        34_230.0,
        wall_s=158.8,
        compile_s=142.7,
        step_time_s=32_768 / 34_230.0,
        param_count=3_212_749_824,
    )
    walls.observe(FP8, first, "seed", grad_accum=2)
    saved = 12 * 3_212_749_824 / CHECKPOINT_BYTES_PER_S  # fp32 weights and moments
    assert 20 < saved < 30  # 38.6 GB at 1.5 GB/s
    assert walls.headroom_s(FP8) == pytest.approx(
        walls.rerun_s(FP8) + EVAL_COMPILE_SHARE * 142.7 + saved
    )
    expected = walls.headroom_and_parity_s(FP8)
    assert expected == pytest.approx(193.2, rel=0.05), expected  # was 154 s
    # With 8-bit moments the save is 6 B/param, not 12.
    small = {**FP8, "optimizer": "adamw-8bit"}
    walls.observe(small, first, "search", grad_accum=2)
    saved_small = (4 + 2 * (1 + 4 / 256)) * 3_212_749_824 / CHECKPOINT_BYTES_PER_S
    assert walls.headroom_s(small) - walls.rerun_s(small) == pytest.approx(
        EVAL_COMPILE_SHARE * 142.7 + saved_small
    )


def test_a_headroom_check_adds_its_evaluation_and_checkpoint_phases() -> None:
    """Since 2026-12-02 the worker times the headroom check's evaluation pass and its save as
    phases of their own (`eval`, `checkpoint`), beside what is left of `checks`: the extra a
    headroom check costs is their sum (the Llama 3B check of that day: 112 s in all)."""
    walls = TrialWalls()
    walls.observe(FP8, _llama_3b_fp8(), "seed", grad_accum=4)
    phases = {"first_step": 59.5, "checks": 0.4, "eval": 64.0, "checkpoint": 47.5}
    walls.observe(
        FP8, measured(29_925.0, wall_s=181.9, compile_s=58.4, phases_s=phases), "headroom"
    )
    assert walls.headroom_s(FP8) == pytest.approx(walls.rerun_s(FP8) + 111.9)
    # A parity trial runs none of them: its estimate is the same whichever phases were split.
    assert walls.parity_s(FP8) > 0
    # The headroom check that runs the candidate's parity steps first: 50 steps of one
    # micro-batch more (the seed's step of 4 took 1.07 s), its compile counted once.
    assert walls.headroom_and_parity_s(FP8) == pytest.approx(
        walls.headroom_s(FP8) + PARITY_STEPS * 1.07 / 4
    )
    assert walls.due([("headroom+parity", FP8)])[0].expected_s == walls.headroom_and_parity_s(FP8)


def test_the_numerics_reference_is_timed_by_the_config_it_runs() -> None:
    """The 2026-12-03 Llama 3B study (its database is committed): the bf16 expert default took
    85 s (64 s compiling cold), the fp8 seed 160 s (147 s). The reference runs the candidate's
    knobs at bf16, so it takes what the bf16 trial took; it was expected at 86 s from the fp8
    trial's compile, and ran in 44 s (warm)."""
    import json
    import sqlite3
    from pathlib import Path

    from autotuner.search.space import load_space
    from autotuner.spec import ModelSpec, TrialResult
    from tests.search.conftest import make_policy

    db = Path(__file__).resolve().parents[2] / (
        "bench/results/h200_session_20261203/tune-llama-3b.db"
    )
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        rows = con.execute(
            "SELECT params, result, purpose FROM trials WHERE number IN (0, 1) ORDER BY number"
        ).fetchall()
    space = load_space("single-gpu").model_copy(update={"global_batch_tokens": 32768})
    policy = make_policy(space, model=ModelSpec.resolve({"preset": "llama-3b"}))
    trials = [(json.loads(p), TrialResult.model_validate_json(r), u) for p, r, u in rows]
    for number, (params, result, purpose) in enumerate(trials):
        policy.observe(number, params, result, purpose)
    (bf16, _, _), (fp8, _, _) = trials
    due = {c.purpose: c for c in policy._checks_due(None)}
    reference = due["parity-ref"]
    assert reference.params == fp8  # the row carries the candidate it checks
    assert reference.expected_s == pytest.approx(policy.walls.parity_s(bf16))
    assert reference.expected_s < 60.0 < policy.walls.parity_s(fp8)


def test_the_plan_times_the_numerics_reference_it_will_run() -> None:
    """The fp8 winner (cuDNN) is checked against bf16 on the expert default's graph (flash),
    which the study compiled: the plan's reference is that config, warm, as the endgame runs
    it (one answer: policy.reference_knobs), not the never-built bf16 cuDNN graph."""
    from autotuner.purpose import Purpose
    from autotuner.search.space import parse_space
    from tests.fakes import FAKE_H200, measured
    from tests.search.conftest import GPT2, make_policy

    space = parse_space(
        {
            "name": "ref",
            "knobs": {"precision": ["bf16", "fp8-tensorwise"], "attention": ["flash", "cudnn"]},
            "fixed": {"micro_batch_size": 8, "compile_mode": "default"},
        }
    )
    policy = make_policy(space, model=GPT2)
    expert = {"precision": "bf16", "attention": "flash"}
    winner = {"precision": "fp8-tensorwise", "attention": "cudnn"}
    for number, params in enumerate((expert, winner)):
        result = measured(100_000.0, fingerprint=FAKE_H200, wall_s=60.0, compile_s=40.0)
        policy.observe(number, params, result, "seed")
    ref = policy.reference_knobs(policy.knobs(winner))
    assert ref is not None and (ref.precision.value, ref.attention.value) == ("bf16", "flash")
    assert policy._as_run(Purpose.PARITY_REFERENCE, winner) == expert
    # Warm: the expert default's wall less its compile's warm saving, plus the parity steps.
    assert policy.walls.expected_s(Purpose.PARITY_REFERENCE, expert) < 60.0


# Llama 8B on the H200 (2026-12-06): full recompute, its trial 106 s with 88 s of cold compile.
CKPT = {"precision": "bf16", "micro_batch_size": 8, "checkpointing": "full"}
PLAIN = {"precision": "bf16", "micro_batch_size": 2, "checkpointing": "none"}


def _recomputing_walls() -> TrialWalls:
    walls = TrialWalls(recomputes=lambda p: p.get("checkpointing", "none") != "none")
    walls.observe(CKPT, measured(9_474.0, wall_s=106.0, compile_s=88.0), "seed")
    walls.observe(PLAIN, measured(9_443.0, wall_s=128.0, compile_s=111.0), "seed")
    return walls


def test_a_checkpointed_configs_rerun_is_expected_to_compile_cold() -> None:
    """On the H200 no checkpointed graph hit the study's compile cache: its re-measurement was
    expected at 57 s (warm) and took 120 s, and the end checks it crowded out never ran."""
    walls = _recomputing_walls()
    assert RECOMPUTE_WARM_SHARE == 1.0
    assert walls.warm_share(CKPT) == 1.0 and walls.rerun_s(CKPT) == 106.0
    assert walls.warm_share(PLAIN) == WARM_COMPILE_SHARE
    assert walls.rerun_s(PLAIN) == 128.0 - 111.0 * (1 - WARM_COMPILE_SHARE)
    # The re-measurement the 8B study ran at 5.8 of its 10 minutes: with the headroom check
    # kept for, it does not fit any more.
    time = TimeLeft(elapsed_s=5.8 * 60, budget_s=600.0)
    checks = walls.due([("headroom", CKPT)])
    rerun = walls.due([("remeasure", CKPT)])[0]
    assert remeasure_cut(time, rerun, checks, done=0, planned=4) is not None


def test_each_cache_class_learns_its_own_warm_share() -> None:
    """The plain config's re-run hit the cache (37 s of 111); the checkpointed one's missed
    (104 s of 88, capped at 1). Neither teaches the other: the study-wide largest share once
    called every re-run cold after one miss."""
    walls = _recomputing_walls()
    walls.observe(PLAIN, measured(9_916.0, wall_s=55.0, compile_s=37.0), "remeasure")
    walls.observe(CKPT, measured(9_581.0, wall_s=120.0, compile_s=104.0), "remeasure")
    assert walls.warm_share(PLAIN) == pytest.approx(37.0 / 111.0)
    assert walls.warm_share(CKPT) == 1.0
    # A study where a checkpointed graph does hit the cache (the CPU) learns that too.
    cpu = TrialWalls(recomputes=lambda p: p.get("checkpointing", "none") != "none")
    cpu.observe(CKPT, measured(100.0, wall_s=35.0, compile_s=29.0), "seed")
    cpu.observe(CKPT, measured(100.0, wall_s=8.0, compile_s=1.8), "remeasure")
    assert cpu.warm_share(CKPT) == pytest.approx(1.8 / 29.0)
    # Without a classifier every config is one class, as before.
    assert TrialWalls().warm_share(CKPT) == WARM_COMPILE_SHARE
