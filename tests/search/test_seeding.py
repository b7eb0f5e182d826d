"""Seeding: the expert default first; later studies start from earlier winners on the same GPU
and model family (a query over the studies table: run on SQLite and Postgres)."""

from __future__ import annotations

from typing import Any

import pytest

from autotuner.executors.base import Target
from autotuner.executors.replay import Landscape
from autotuner.purpose import Purpose
from autotuner.search.costmodel import CostModel
from autotuner.search.headroom import usable_gib
from autotuner.search.seeding import FIRST_IF_FASTER
from autotuner.spec import Knobs, ModelSpec, TrialResult, TrialStatus, canonical_params
from autotuner.storage.session import Database
from tests.search.conftest import GPT2, H200, gpt2_space, make_policy


def test_first_trial_is_the_expert_default_with_the_largest_fitting_micro_batch(
    db, run_study
) -> None:
    space = gpt2_space(
        {
            "micro_batch_size": [4, 8, 16, 32, 64, 128, 256, 512],
            "precision": ["fp32", "tf32", "bf16"],
            "attention": ["math", "efficient", "flash", "cudnn"],
            "compile_mode": ["none", "max-autotune-no-cudagraphs", "default"],
            "checkpointing": ["full", "none"],
            "optimizer": ["adamw-foreach", "adamw-fused"],
        }
    )
    from tests.fakes import physical_landscape

    landscape = physical_landscape(
        GPT2, {k: list(v) for k, v in space.knobs.items()}, fixed={"vocab_pad_multiple": 64}
    )
    _, _, trials, _ = run_study(db, space=space, landscape=landscape, trials=6)
    first = trials[0]
    assert first.purpose == Purpose.EXPERT_DEFAULT
    p = first.params
    assert (p["precision"], p["attention"], p["compile_mode"]) == ("bf16", "flash", "default")
    assert (p["checkpointing"], p["optimizer"]) == ("none", "adamw-fused")
    # The largest micro-batch the (uncalibrated) cost model is confident fits, and no larger.
    cm = CostModel(GPT2, num_gpus=1, on_cuda=True, limit_gib=H200.memory_gib)
    knobs = space.knobs_for(p, GPT2, 1)
    assert cm.predict(knobs).surely_fits(1.0)
    bigger = knobs.model_copy(update={"micro_batch_size": p["micro_batch_size"] * 2})
    assert not cm.predict(bigger).surely_fits(1.0)
    assert p["micro_batch_size"] >= 64


def test_space_defaults_win_over_the_expert_choices(db, run_study) -> None:
    space = gpt2_space(defaults={"micro_batch_size": 16, "attention": "efficient"})
    _, _, trials, _ = run_study(db, space=space, trials=3)
    assert trials[0].params["micro_batch_size"] == 16
    assert trials[0].params["attention"] == "efficient"
    assert trials[0].params["precision"] == "bf16"


def test_a_later_study_on_the_same_gpu_starts_from_the_earlier_winner(any_db, run_study) -> None:
    _, _, _, first = run_study(any_db, trials=20, seed=5)
    assert first is not None
    winner = {k: first["knobs"][k] for k in gpt2_space().knobs}
    # Without the first study's memory evidence, whose calibration makes the winner the
    # expert default itself (test_memory_history.py): the history seed is what is tested.
    options = {"memory_history": 0}
    _runner, _, trials, _ = run_study(any_db, trials=8, seed=6, options=options)
    seeds = [t.params for t in trials if t.purpose == "seed"]
    assert winner in seeds
    # Within the first few trials (after the expert default), not left to chance.
    assert winner in [t.params for t in trials[:3]]


def test_winners_from_another_gpu_or_family_are_not_used(any_db, run_study) -> None:
    _, _, _, first = run_study(any_db, trials=20, seed=5)
    assert first is not None
    winner = {k: first["knobs"][k] for k in gpt2_space().knobs}
    other_gpu = Target("cuda", 1, "NVIDIA A100-SXM4-80GB", (8, 0), 80.0)
    runner, _, _trials, _ = run_study(
        any_db, trials=4, seed=6, target=other_gpu, options={"neighbour_seeds": False}
    )
    assert runner.policy.seeds(any_db) == [runner.policy.expert_params()]
    llama = runner.policy  # the same policy for a Llama model: nothing from GPT-2 studies
    llama.model = llama.model.model_copy(update={"family": "llama"})
    assert llama._seeder()._history(any_db) == []
    assert Knobs(**winner)  # the winner itself was valid


def test_seeds_cover_fp8_where_the_gpu_has_it() -> None:

    space = gpt2_space(
        {
            "micro_batch_size": [8, 16, 32],
            "precision": ["bf16", "fp8-tensorwise", "fp8-rowwise"],
            "attention": ["flash", "cudnn"],
        }
    )
    a100 = Target("cuda", 1, "NVIDIA A100-SXM4-80GB", (8, 0), 80.0)

    def precisions(target: Target) -> list[str]:
        policy = make_policy(space, target=target, history_seeds=0)
        return [p["precision"] for p in policy.seeds(Database("sqlite://"))]

    on_h200 = precisions(H200)
    assert on_h200[0] == "bf16" and "fp8-tensorwise" in on_h200  # the expert first, then fp8
    assert not [p for p in precisions(a100) if p.startswith("fp8")]  # cc 8.0: no fp8 kernels


def test_the_alternatives_run_fastest_predicted_first() -> None:
    """Llama 3B on the H200: fp8 is the alternative the throughput model's prior expects to be
    fastest, so it runs early, not last (a 10-minute study found its fp8 winner only at 8.4
    min, too late for its numerics check); predicted 1.27x the expert default, it runs before
    it (FIRST_IF_FASTER): replayed on the H200 landscapes, ours then finds the 3B best in 1
    trial instead of 2, at 155 GPU-s instead of 237."""
    from autotuner.search.space import load_space
    from autotuner.spec import ModelSpec

    llama = ModelSpec.resolve({"preset": "llama-3b"})
    policy = make_policy(load_space("single-gpu"), model=llama, history_seeds=0)
    seeds = policy.seeds(Database("sqlite://"))
    expert = policy.expert_params()
    assert seeds[0]["precision"] == "fp8-tensorwise" and seeds[1] == expert
    speed = lambda p: policy.throughput.predict(policy.knobs(p)).tokens_per_s  # noqa: E731
    assert speed(seeds[0]) >= FIRST_IF_FASTER * speed(expert)
    speeds = [speed(p) for p in [seeds[0], *seeds[2:]]]
    assert speeds == sorted(speeds, reverse=True)


def test_the_expert_default_runs_first_unless_an_alternative_is_clearly_faster() -> None:
    """GPT-2 124M on the H200: the prior puts fp8 at 1.10x bf16, within its error (fp8
    measured 0.78x there), so the expert default keeps its place; Llama 8B, where the expert
    default may not fit, keeps it first too: its measurement tells the memory model how tight
    the alternatives that make room are. So does any study with a time budget."""
    from autotuner.search.space import load_space
    from autotuner.spec import ModelSpec

    db = Database("sqlite://")
    for preset in ("gpt2-124m", "llama-8b"):
        model = ModelSpec.resolve({"preset": preset})
        policy = make_policy(load_space("single-gpu"), model=model, history_seeds=0)
        policy.enable_proposals(seed=0)
        plan = policy.seed_plan(db)
        assert plan.now[0] == policy.expert_params(), preset
        fp8 = [p for p in plan.now if p["precision"].startswith("fp8")]
        assert fp8, preset  # fp8 still runs up front, after it
    # Under a time budget the expert default runs first on Llama 3B too: the search may stop
    # for the end checks after one trial, and the expert default is the recommendation's
    # yardstick and the numerics reference's compiled graph.
    llama3 = ModelSpec.resolve({"preset": "llama-3b"})
    policy = make_policy(load_space("single-gpu"), model=llama3, history_seeds=0)
    policy.enable_proposals(seed=0)
    assert policy.seed_plan(db).now[0]["precision"] == "fp8-tensorwise"
    timed = policy.seed_plan(db, timed=True).now
    assert timed[0] == policy.expert_params() and timed[1]["precision"] == "fp8-tensorwise"


LLAMA_1B = ModelSpec.resolve({"preset": "llama-1b"})
# A Llama 1B space where the prior expects fp8 clearly faster: its seed runs before the expert.
FP8_KNOBS: dict[str, list[Any]] = {
    "micro_batch_size": [4, 8, 16],
    "precision": ["bf16", "fp8-tensorwise"],
    "attention": ["flash"],
    "compile_mode": ["default", "none"],
}
FP8_SPACE = gpt2_space(FP8_KNOBS, defaults={"precision": "bf16", "compile_mode": "default"})


def _llama_fp8_landscape(fp8_speed: float) -> Landscape:
    """The physical fake landscape of FP8_KNOBS on Llama 1B, its fp8 configs `fp8_speed`
    times their bf16 twin's."""
    from tests.fakes import physical_landscape

    def scaled(params: dict, result: TrialResult) -> TrialResult:
        if not params["precision"].startswith("fp8") or result.status != TrialStatus.OK:
            return result
        speeds = ("tokens_per_s", "tokens_per_s_min", "tokens_per_s_max", "tokens_per_s_per_gpu")
        return result.model_copy(
            update={k: v * fp8_speed for k in speeds if (v := getattr(result, k))}
        )

    landscape = physical_landscape(LLAMA_1B, FP8_KNOBS, fixed={"vocab_pad_multiple": 64})
    return Landscape([(p, scaled(p, r)) for p, r in landscape.entries])


@pytest.mark.parametrize("fp8_speed", [1.3, 0.7])
def test_where_fp8_runs_first_the_winner_is_compared_with_the_expert_default(
    db, run_study, fp8_speed: float
) -> None:
    """An untimed Llama 1B study on the H200: the fp8 seed runs first (trial #0), the expert
    default (bf16) second. The recommendation compares the winner with the trial marked
    expert-default, never with #0: were #0 the yardstick, an fp8 winner would be "the expert
    default is the recommendation", and a bf16 expert default that won would be slower than
    itself."""
    landscape = _llama_fp8_landscape(fp8_speed)
    _, _, trials, rec = run_study(
        db, space=FP8_SPACE, landscape=landscape, model=LLAMA_1B, trials=6
    )
    assert trials[0].purpose == "seed" and trials[0].params["precision"] == "fp8-tensorwise"
    [expert] = [t for t in trials if t.purpose == Purpose.EXPERT_DEFAULT]
    assert expert.number == 1 and expert.params["precision"] == "bf16"
    assert rec is not None
    vs = rec["vs_expert_default"]
    assert vs["trial_number"] == expert.number
    assert vs["objective_value"] == expert.objective_value
    winner_is_expert = rec["params"] == expert.params
    assert winner_is_expert == vs["text"].startswith("the expert default is the recommendation")
    if fp8_speed > 1:  # the fp8 seed (#0) wins, 1.3x the expert default
        assert rec["trial_number"] == 0 and not winner_is_expert
        assert vs["text"].startswith("1.30x the expert default (trial #1, "), vs["text"]
    else:  # fp8 is slower: the expert default is the fastest config of the space
        assert winner_is_expert and vs["speedup"] == 1.0, vs


def test_seeds_not_run_before_a_restart_run_after_it(db) -> None:
    """The coordinator dies with its second seed in flight: the restarted one runs the seeds it
    had queued (the study row keeps the plan), in their order, before anything but a leader's
    next micro-batch up, and marks
    the expert default as before. A restart planned no seeds before: the study went on with
    the sampler alone, and could skip the fp8 seed the Llama studies' best hangs on."""
    from autotuner.executors.replay import ReplayExecutor
    from autotuner.options import StudyOptions
    from autotuner.storage.models import TrialState
    from autotuner.storage.study_repo import StudyRepo
    from autotuner.storage.trial_repo import TrialRepo
    from autotuner.study.coordinator import StudyRunner, create_study
    from tests.fakes import physical_landscape

    knobs: dict[str, list[Any]] = {
        **FP8_KNOBS,
        "micro_batch_size": [4, 8, 16, 32, 64],
        "attention": ["flash", "cudnn"],
        "compile_mode": ["default", "none", "reduce-overhead"],
    }
    space = gpt2_space(knobs, defaults={"precision": "bf16", "compile_mode": "default"})
    landscape = physical_landscape(LLAMA_1B, knobs, fixed={"vocab_pad_multiple": 64})
    # Every seed up front (none waits for the throughput model): more than two to queue.
    options = StudyOptions(seeds_yield=False, history_seeds=0)
    study_id = create_study(db, model=LLAMA_1B, space=space, max_trials=12, options=options)
    executor = ReplayExecutor(landscape, list(knobs), target=H200)
    runner = StudyRunner(db, study_id, executor, poll_s=0.0)
    runner.start()
    with db.read() as s:
        plan = StudyRepo(s).require(study_id).seeds
    assert plan is not None and len(plan["now"]) >= 4, "the test needs seeds to queue"
    seeds = [canonical_params(p) for p in plan["now"]]

    def planned(params: dict[str, Any]) -> bool:
        return canonical_params({k: params[k] for k in knobs}) in seeds

    # A leader's next micro-batch up may run between the seeds (search/micro_batch_up.py):
    # the restart comes while the second seed of the plan runs.
    while sum(planned(c.knobs.model_dump(mode="json")) for c in executor.submitted) < 2:
        runner.step()
    with db.session() as s:
        StudyRepo(s).release(study_id, runner.owner)
    StudyRunner(db, study_id, executor, poll_s=0.0).run()
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
    ran = [
        canonical_params(t.params)
        for t in trials
        if t.state != TrialState.PRUNED and planned(t.params)
    ]
    # #0, #1 (lost in the restart), its retry, then the queued seeds in their order.
    assert ran[:2] == seeds[:2] and ran[2] == seeds[1], (ran, seeds)
    assert ran[3 : len(seeds) + 1] == seeds[2:], (ran, seeds)
    [expert] = {
        t.number for t in trials if t.purpose == Purpose.EXPERT_DEFAULT and t.retry_of is None
    }
    assert canonical_params(trials[expert].params) == canonical_params(plan["expert"])


def test_a_seeds_hook_marks_the_config_that_runs_in_the_expert_defaults_place(db) -> None:
    """The replay maps each seed to the nearest recorded config not yet taken (the `seeds`
    hook, bench/replay_lib/universe.py): with the fp8 seed first, an unrecorded expert default
    whose nearest is the fp8 seed's config runs as the next nearest. That one is the expert
    default, not what the expert default maps to alone: the fp8 seed's config was once marked
    so, and its winner "the expert default"."""
    from autotuner.executors.replay import ReplayExecutor
    from autotuner.storage.study_repo import StudyRepo
    from autotuner.storage.trial_repo import TrialRepo
    from autotuner.study.coordinator import StudyRunner, create_study

    landscape = _llama_fp8_landscape(1.3)
    expert = {"micro_batch_size": 16, "precision": "bf16", "attention": "flash"}
    expert["compile_mode"] = "default"
    # Unrecorded: the expert default. fp8 configs first (ties go to the first recorded).
    recorded = sorted(
        (p for p, _ in landscape.entries if p != expert), key=lambda p: p["precision"] == "bf16"
    )

    def differ(a: dict[str, Any], b: dict[str, Any]) -> int:
        return sum(a[k] != b[k] for k in FP8_KNOBS)

    def nearest_untaken(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for c in configs:
            out.append(min((r for r in recorded if r not in out), key=lambda r: differ(r, c)))
        return out

    study_id = create_study(db, model=LLAMA_1B, space=FP8_SPACE, max_trials=6)
    executor = ReplayExecutor(landscape, list(FP8_KNOBS), target=H200)
    StudyRunner(db, study_id, executor, poll_s=0.0, seeds=nearest_untaken).run()
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
        rec = StudyRepo(s).require(study_id).recommendation
    fp8, instead = trials[0], trials[1]
    assert fp8.params == {**expert, "precision": "fp8-tensorwise"} and fp8.purpose == "seed"
    assert differ(instead.params, expert) == 1 and instead.params["precision"] == "bf16"
    assert instead.purpose == Purpose.EXPERT_DEFAULT
    assert [t.number for t in trials if t.purpose == Purpose.EXPERT_DEFAULT] == [1]
    assert rec is not None and rec["vs_expert_default"]["trial_number"] == 1
    assert not rec["vs_expert_default"]["text"].startswith("the expert default is")


def test_a_precision_seed_takes_the_kernel_the_hardware_prior_expects_fastest() -> None:
    """Llama 3B: the fp8 seed may be the last search trial of a 10-minute study (H200,
    2026-12-04: the expert default, then fp8 with flash at 31,777 tok/s, then the end checks),
    so on Hopper, where the prior expects cuDNN faster (it measured 2-6% faster in 13 of 14
    H200 configs), the fp8 seed runs cuDNN (33,609 on the H200). On an Ada GPU, which has fp8
    but no such evidence, it keeps the expert's flash; the expert default keeps flash on both."""
    from autotuner.search.space import load_space
    from autotuner.spec import ModelSpec

    llama = ModelSpec.resolve({"preset": "llama-3b"})
    l40s = Target("cuda", 1, "NVIDIA L40S", (8, 9), 44.5)

    for target, kernel in ((H200, "cudnn"), (l40s, "flash")):
        policy = make_policy(load_space("single-gpu"), model=llama, target=target, history_seeds=0)
        every = policy.seeds(Database("sqlite://"))
        assert policy.expert_params()["attention"] == "flash", target
        fp8 = [p for p in every if p["precision"].startswith("fp8")]
        assert fp8 and {p["attention"] for p in fp8} == {kernel}, (target, fp8)
        # Only the kernel moves: the rest is the expert default's.
        expert = {
            k: v for k, v in policy.expert_params().items() if k not in ("precision", "attention")
        }
        assert all({k: p[k] for k in expert} == expert for p in fp8)


def test_only_the_fastest_alternative_and_other_precisions_run_before_the_model_proposes() -> None:
    """Llama 3B on the H200: the expert default and its fp8 alternative run first; the bf16
    alternatives (CUDA graphs, cuDNN) wait for the throughput model to run
    out of proposals. Replayed on the H200 landscape, running them first put three bf16 trials
    between the fp8 seed and the best config, which the model proposed as soon as it could."""
    from autotuner.search.space import load_space
    from autotuner.spec import ModelSpec

    llama = ModelSpec.resolve({"preset": "llama-3b"})
    db = Database("sqlite://")
    policy = make_policy(load_space("single-gpu"), model=llama, history_seeds=0)
    every = policy.seeds(db)
    assert policy.seed_plan(db).later == []  # nothing proposes: every seed first
    policy.enable_proposals(seed=0)
    plan = policy.seed_plan(db)
    assert plan.all == every and len(every) >= 4
    # fp8 first: the prior expects it clearly faster (FIRST_IF_FASTER).
    assert plan.now[1] == policy.expert_params()
    assert [p["precision"] for p in plan.now] == ["fp8-tensorwise", "bf16"]
    assert plan.later and {p["precision"] for p in plan.later} == {"bf16"}
    assert set(policy.seed_roles) == {canonical_params(p) for p in every}  # all labelled seeds

    off = make_policy(load_space("single-gpu"), model=llama, history_seeds=0, seeds_yield=False)
    off.enable_proposals(seed=0)
    assert off.seed_plan(db).now == every


def test_where_nothing_fits_unchecked_the_expert_turns_on_checkpointing() -> None:
    """An engineer whose model does not fit turns on checkpointing rather than launch a
    config the memory model says will not fit (Llama 8B on one H200 did: its expert default,
    mb 1 without checkpointing, ran out of memory, bench/results/h200_session_20261203)."""
    space = gpt2_space(
        {"micro_batch_size": [4, 8, 16, 32], "checkpointing": ["none", "selective", "full"]}
    )

    def expert_on(limit_gib: float) -> tuple[dict, bool, object]:
        small = Target("cuda", 1, "FakeGpu small", (9, 0), limit_gib)
        policy = make_policy(space, target=small, history_seeds=0)
        expert = policy.expert_params()
        return expert, policy.expert_fits(expert), policy

    roomy, fits, _ = expert_on(139.8)
    assert roomy["checkpointing"] == "none" and fits  # the usual expert where it fits
    tight, fits, policy = expert_on(8.0)
    assert tight["checkpointing"] == "full" and fits
    usable = usable_gib(8.0, policy.options.headroom)
    for checkpointing in ("none", "selective"):  # no micro-batch fits without it
        knobs = policy.knobs({**tight, "checkpointing": checkpointing, "micro_batch_size": 4})
        assert not policy.cost.predict(knobs, usable).surely_fits(1.0)
    # Nothing fits for sure: the least memory (full checkpointing), not the smallest of the
    # first choice, and said so.
    none_fits, fits, policy = expert_on(4.0)
    assert none_fits["checkpointing"] == "full" and not fits
    need = policy.cost.predict(policy.knobs(none_fits)).need_gib
    plain = policy.cost.predict(policy.knobs({**none_fits, "checkpointing": "none"})).need_gib
    assert need < plain


def test_where_the_optimizer_state_crowds_out_activations_an_8bit_adamw_seed_runs_first() -> None:
    """Llama 8B on one H200: fp32 AdamW state (16 B/param with the weights and gradients) leaves
    the expert default checkpointing every block at the edge of the headroom (measured 9.7% free
    of the 10% kept: nothing recommendable, bench/results/h200_session_20261204). The engineer's
    next move, 8-bit moments, frees 6 B/param: that seed runs up front, without checkpointing,
    and is the only seed the memory model is sure leaves the headroom."""
    from autotuner.search.space import load_space
    from autotuner.spec import ModelSpec

    db = Database("sqlite://")
    llama8 = ModelSpec.resolve({"preset": "llama-8b"})
    policy = make_policy(load_space("single-gpu"), model=llama8, history_seeds=0)
    policy.enable_proposals(seed=0)
    expert = policy.expert_params()
    assert expert["checkpointing"] == "full" and expert["optimizer"] == "adamw-fused"
    assert not policy.expert_fits(expert)
    plan = policy.seed_plan(db)
    # Up front with the expert default: its own config under the expandable allocator (see
    # test_where_fragmentation_may_break_the_headroom_...) and, built on that, the 8-bit seed.
    assert plan.now[1] == {**expert, "allocator": "expandable"}
    (small,) = [p for p in plan.all if p["optimizer"] == "adamw-8bit"]
    assert small in plan.now
    assert small == {
        **expert,
        "optimizer": "adamw-8bit",
        "checkpointing": "none",
        "allocator": "expandable",
        "micro_batch_size": small["micro_batch_size"],
    }
    assert policy.expert_fits(small)
    # Where the expert fits without checkpointing (Llama 3B), no 8-bit seed: its numerics
    # change for a few percent of the optimizer's time, which the search may still try.
    llama3 = ModelSpec.resolve({"preset": "llama-3b"})
    roomy = make_policy(load_space("single-gpu"), model=llama3, history_seeds=0)
    assert all(p["optimizer"] != "adamw-8bit" for p in roomy.seeds(db))


def test_where_fragmentation_may_break_the_headroom_the_expandable_allocator_is_seeded() -> None:
    """Llama 8B's expert default on one H200 (full checkpointing, micro-batch 8) allocated
    121.7 GiB and reserved 125.6: 9.7% free, tight (bench/results/h200_session_20261205). The
    same config under expandable segments is predicted to fit, so it runs right after the
    expert default, before anything that changes numerics. Where the expert fits (Llama 3B),
    or the space lacks the knob, there is no such seed."""
    from autotuner.search.space import load_space
    from autotuner.spec import ModelSpec

    db = Database("sqlite://")
    llama8 = ModelSpec.resolve({"preset": "llama-8b"})
    policy = make_policy(load_space("single-gpu"), model=llama8, history_seeds=0)
    policy.enable_proposals(seed=0)
    expert = policy.expert_params()
    assert expert["allocator"] == "default" and not policy.expert_fits(expert)
    roomy = {**expert, "allocator": "expandable"}
    plan = policy.seed_plan(db)
    assert plan.now[:2] == [expert, roomy]
    # Every other alternative starts from it, the fp8 seed among those run first: with the
    # default allocator it keeps about the expert's memory (Llama 8B's fp8 trial on the H200
    # was as tight as the expert default, bench/results/h200_session_20261203b).
    assert all(p["allocator"] == "expandable" for p in plan.all[1:])
    assert any(p["precision"].startswith("fp8") for p in plan.now)
    usable = 139.8 * 0.9
    before, after = (policy.cost.predict(policy.knobs(p), usable) for p in (expert, roomy))
    assert before.need_gib > usable >= after.need_gib
    llama3 = ModelSpec.resolve({"preset": "llama-3b"})
    fits = make_policy(load_space("single-gpu"), model=llama3, history_seeds=0)
    assert all(p["allocator"] == "default" for p in fits.seeds(db))
    space = load_space("single-gpu")
    knobs = {k: v for k, v in space.knobs.items() if k != "allocator"}
    without = make_policy(space.model_copy(update={"knobs": knobs}), model=llama8, history_seeds=0)
    assert all("allocator" not in p for p in without.seeds(db))
