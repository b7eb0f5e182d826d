"""The numerics check of the winner (autotuner/search/numerics.py) on the replay executor: a
winner whose precision changes numerics is recommended only after its loss curve agrees with
the reference precision's; a provoked drift marks it `numerics` and the next candidate wins."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from autotuner.api.schemas import Recommendation
from autotuner.cli.render import best_table
from autotuner.executors.base import Target
from autotuner.executors.replay import Landscape
from autotuner.options import StudyOptions
from autotuner.purpose import SEARCH_TRIALS, Purpose
from autotuner.search.numerics import (
    PARITY_STEPS,
    TOLERANCE_REL,
    as_ended,
    cold_reference,
    compare_curves,
    space_changes_numerics,
    warm_reference,
)
from autotuner.search.objective import Objective
from autotuner.search.space import parse_space
from autotuner.spec import (
    Attention,
    Checkpointing,
    CompileMode,
    CompileScope,
    Kernels,
    Knobs,
    ModelSpec,
    Optimizer,
    Precision,
)
from autotuner.storage.models import Trial, TrialState
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import StudyRunner, create_study
from autotuner.study.recommend import recommend
from tests.fakes import FAKE_GPU, FakeParityReplay, measured, parity_curve

H200 = Target("cuda", 1, "replay", (9, 0), 80.0)
SPEED = {"fp8-tensorwise": 2.0, "fp16": 1.9, "bf16": 1.8, "fp32": 1.0}


def landscape(knobs: dict[str, list[Any]]) -> Landscape:
    """Throughput by precision (fp8 > fp16 > bf16 > fp32), a little more at micro-batch 16."""
    entries = []
    for mb in knobs.get("micro_batch_size", [8]):
        for precision in knobs["precision"]:
            tps = 10_000.0 * SPEED[precision] * (1.05 if mb == 16 else 1.0)
            p = {"precision": precision}
            if "micro_batch_size" in knobs:
                p["micro_batch_size"] = mb
            entries.append((p, measured(tps, peak_mem_gib=mb, fingerprint=FAKE_GPU, wall_s=10.0)))
    return Landscape(entries)


def run_study(
    sqlite_url: str,
    knobs: dict[str, list[Any]],
    *,
    drifting: tuple[str, ...] = (),
    max_trials: int = 20,
    fixed: dict[str, Any] | None = None,
    options: StudyOptions | None = None,
    recorded: Landscape | None = None,
) -> tuple[list[Trial], dict[str, Any], FakeParityReplay]:
    """A study over `knobs` replayed on `recorded` (default: `landscape(knobs)`)."""
    db = Database(sqlite_url)
    fixed = {"attention": "efficient", **(fixed or {})}
    fixed = {k: v for k, v in fixed.items() if k not in knobs}  # a searched knob is not fixed
    space = parse_space({"name": "numerics", "knobs": knobs, "fixed": fixed})
    model = ModelSpec.resolve({"preset": "tiny"})
    study_id = create_study(db, model=model, space=space, max_trials=max_trials, options=options)
    executor = FakeParityReplay(
        recorded or landscape(knobs), list(knobs), target=H200, drifting=drifting
    )
    StudyRunner(db, study_id, executor, poll_s=0.0, heartbeat_interval_s=3600).run()
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
        rec = StudyRepo(s).require(study_id).recommendation
    assert rec is not None
    return trials, rec, executor


def by_purpose(trials: list[Trial], purpose: str) -> list[Trial]:
    return [t for t in trials if t.purpose == purpose]


def candidate_runs(trials: list[Trial]) -> list[Trial]:
    """The numerics check's candidate runs: a headroom check that ran the parity steps (with
    the headroom check on, the default), else a parity trial of their own."""
    return [
        t
        for t in trials
        if t.purpose == "parity"
        or (t.purpose == "headroom" and t.config["measure"].get("parity_steps"))
    ]


def test_a_matching_fp8_winner_is_checked_and_recommended(sqlite_url: str) -> None:
    trials, rec, _ = run_study(sqlite_url, {"precision": ["bf16", "fp8-tensorwise"]})
    assert rec["knobs"]["precision"] == "fp8-tensorwise"
    ref, cand = by_purpose(trials, "parity-ref"), candidate_runs(trials)
    assert len(ref) == 1 and len(cand) == 1 and ref[0].number < cand[0].number
    assert ref[0].config["knobs"]["precision"] == "bf16"
    assert cand[0].config["knobs"]["precision"] == "fp8-tensorwise"
    for t in (ref[0], cand[0]):
        assert t.config["measure"]["parity_steps"] == PARITY_STEPS
        assert t.state == TrialState.COMPLETE and t.objective_value is None  # never a candidate
    num = rec["numerics"]
    assert num["checked"] and num["passed"] and num["reference_precision"] == "bf16"
    assert num["diff_rel"] < TOLERANCE_REL and num["tolerance_rel"] == TOLERANCE_REL
    assert num["parity_trials"] == [ref[0].number, cand[0].number]
    assert "within" in num["text"] and not num["skipped"]
    assert rec["trial_number"] not in num["parity_trials"]
    # The parity trials end the study and count against its budget.
    assert trials[-1].number == cand[0].number
    assert len([t for t in trials if t.state != TrialState.PRUNED]) <= 20


def test_a_drifting_winner_is_marked_numerics_and_the_runner_up_recommended(
    sqlite_url: str,
) -> None:
    trials, rec, _ = run_study(
        sqlite_url, {"precision": ["bf16", "fp16", "fp8-tensorwise"]}, drifting=("fp8-tensorwise",)
    )
    fp8 = [t for t in candidate_runs(trials) if t.params["precision"] == "fp8-tensorwise"]
    assert len(fp8) == 1
    assert fp8[0].state == TrialState.INFEASIBLE and fp8[0].error_class == "numerics"
    assert "beyond the tolerance" in (fp8[0].error_message or "")
    # The runner-up changes numerics too (fp16): it is checked in turn, passes, and wins.
    assert rec["knobs"]["precision"] == "fp16"
    num = rec["numerics"]
    assert num["checked"] and num["passed"] and num["reference_precision"] == "bf16"
    assert [s["precision"] for s in num["skipped"]] == ["fp8-tensorwise"]
    assert num["skipped"][0]["state"] == "failed" and num["skipped"][0]["diff_rel"] > 0.05
    assert "failed the numerics check" in num["text"]
    assert len(candidate_runs(trials)) == 2 and len(by_purpose(trials, "parity-ref")) == 2
    # The failed config is no runner-up either, nor on the Pareto front.
    assert rec["runner_up"]["params"]["precision"] == "bf16"
    assert all(p["params"]["precision"] != "fp8-tensorwise" for p in rec["pareto"])
    # Shown: the API's Recommendation declares it, `autotuner best` prints it.
    assert Recommendation.model_validate(rec).numerics == num
    view = {"best": rec, "study": "s", "status": "completed", "total_trials": len(trials)}
    console = Console(width=400, record=True)
    console.print(best_table(view))
    line = next(x for x in console.export_text().splitlines() if "numerics" in x)
    assert "fp8-tensorwise) was faster but failed the numerics check" in line, line


def test_at_most_two_candidates_are_checked(sqlite_url: str) -> None:
    """Both fp8 candidates drift: after two failed checks the unchecked fp16 configs are
    passed over for the best bf16 one, rather than recommended unchecked."""
    knobs = {"micro_batch_size": [8, 16], "precision": ["bf16", "fp16", "fp8-tensorwise"]}
    trials, rec, _ = run_study(sqlite_url, knobs, drifting=("fp8-tensorwise", "fp16"))
    parity = candidate_runs(trials)
    assert len(parity) == 2 and all(t.error_class == "numerics" for t in parity)
    assert rec["knobs"]["precision"] == "bf16" and rec["params"]["micro_batch_size"] == 16
    assert rec["numerics"]["checked"] is False and len(rec["numerics"]["skipped"]) == 2
    assert "no check needed" in rec["numerics"]["text"]


def test_no_check_for_a_reference_precision_winner(sqlite_url: str) -> None:
    trials, rec, executor = run_study(sqlite_url, {"precision": ["bf16", "fp32"]})
    assert not executor.parity and not by_purpose(trials, "parity-ref")
    assert rec["knobs"]["precision"] == "bf16"
    assert rec["numerics"]["checked"] is False and "no check needed" in rec["numerics"]["text"]


def test_without_budget_the_winner_is_reported_unchecked(sqlite_url: str) -> None:
    _, rec, executor = run_study(
        sqlite_url, {"precision": ["bf16", "fp8-tensorwise"]}, max_trials=2
    )
    assert not executor.parity
    assert rec["knobs"]["precision"] == "fp8-tensorwise"
    assert rec["numerics"]["checked"] is False and "not checked" in rec["numerics"]["text"]
    # Stored as the study ended: the check did not run, not "runs at the end of the study".
    assert rec["numerics"]["ended_unchecked"] is True
    assert "the study ended before its parity check" in rec["numerics"]["text"]


def test_a_study_can_turn_the_check_off_and_says_so(sqlite_url: str) -> None:
    """Recording a landscape (bench/record_landscape_h200.sh) spends no GPU time on it; the
    recommendation says the check was off, not that it is still to come."""
    options = StudyOptions(numerics_check=False)
    trials, rec, executor = run_study(
        sqlite_url, {"precision": ["bf16", "fp8-tensorwise"]}, options=options
    )
    assert not executor.parity and not by_purpose(trials, "parity-ref")
    assert not candidate_runs(trials)
    assert rec["knobs"]["precision"] == "fp8-tensorwise"
    num = rec["numerics"]
    assert num["checked"] is False and num["ended_unchecked"] is True
    assert "turned the check off" in num["text"]
    assert as_ended(num) == num  # final as stored: not rewritten as "the study ended before"


@pytest.mark.parametrize("drifting", [(), ("adamw-8bit",)], ids=["matches", "drifts"])
def test_an_8bit_adamw_winner_is_checked_against_fp32_moments(
    sqlite_url: str, drifting: tuple[str, ...]
) -> None:
    """8-bit AdamW moments change the numerics as a precision does: the winner with them is
    checked against the same knobs with fp32 moments (fused AdamW). Here those fit as they
    are (a tiny model): the reference keeps the candidate's checkpointing, and so its
    compiled graph (tests/coordinator/test_optimizer_state_room.py has the 8B case, where the
    reference recomputes every block to fit)."""
    knobs = {"optimizer": ["adamw-fused", "adamw-8bit"]}
    entries = [
        ({"optimizer": o}, measured(tps, fingerprint=FAKE_GPU, wall_s=10.0))
        for o, tps in (("adamw-fused", 10_000.0), ("adamw-8bit", 12_000.0))
    ]
    trials, rec, _ = run_study(
        sqlite_url,
        knobs,
        fixed={"precision": "bf16"},
        drifting=drifting,
        max_trials=10,
        recorded=Landscape(entries),
    )
    (ref,) = by_purpose(trials, "parity-ref")
    assert ref.params["optimizer"] == "adamw-8bit"  # the row names the candidate it checks
    ran = ref.config["knobs"]
    assert (ran["optimizer"], ran["checkpointing"], ran["precision"]) == (
        "adamw-fused",
        "none",
        "bf16",
    )
    (cand,) = [t for t in candidate_runs(trials) if t.params["optimizer"] == "adamw-8bit"]
    assert cand.config["knobs"]["optimizer"] == "adamw-8bit"
    if drifting:
        assert cand.state == TrialState.INFEASIBLE and cand.error_class == "numerics"
        assert "away from bf16 with fp32 AdamW moments" in (cand.error_message or "")
        assert rec["knobs"]["optimizer"] == "adamw-fused"
    else:
        assert rec["knobs"]["optimizer"] == "adamw-8bit" and rec["numerics"]["passed"]
        assert (
            rec["numerics"]["text"].startswith("bf16 with 8-bit AdamW moments: loss within")
            and "of bf16 with fp32 AdamW moments" in rec["numerics"]["text"]
        )
    # A study that ends before the check says so for the 8-bit state too (bf16 itself is
    # the reference precision: only the entry's own flag tells).
    unchecked = {**rec["numerics"], "checked": False, "parity_trials": [], "passed": None}
    unchecked.pop("ended_unchecked", None)
    ended = as_ended(unchecked)
    if not drifting:
        assert ended["ended_unchecked"]
        assert ended["text"].startswith("bf16 with 8-bit AdamW moments changes numerics")


@pytest.mark.parametrize(
    ("fused", "said"),
    [("fused-ce", "Liger's fused-ce kernels"), ("cce", "cut-cross-entropy's fused loss")],
)
@pytest.mark.parametrize("drifting", [False, True])
def test_a_fused_loss_winner_is_checked_against_the_unfused_loss(
    sqlite_url: str, drifting: bool, fused: str, said: str
) -> None:
    """Liger's fused linear cross-entropy computes the loss and its gradient chunk by chunk,
    cut-cross-entropy's skips gradient blocks below bf16's resolution: a winner with either is
    checked like fp8, against the same knobs with the unfused loss (kernels none) at the
    reference precision."""
    knobs = {"kernels": ["none", fused]}
    entries = [
        ({"kernels": k}, measured(tps, fingerprint=FAKE_GPU, wall_s=10.0))
        for k, tps in (("none", 10_000.0), (fused, 12_000.0))
    ]
    trials, rec, _ = run_study(
        sqlite_url,
        knobs,
        fixed={"precision": "bf16"},
        drifting=(fused,) if drifting else (),
        max_trials=10,
        recorded=Landscape(entries),
    )
    (ref,) = by_purpose(trials, "parity-ref")
    assert ref.params["kernels"] == fused  # the row names the candidate it checks
    assert (ref.config["knobs"]["kernels"], ref.config["knobs"]["precision"]) == ("none", "bf16")
    (cand,) = [t for t in candidate_runs(trials) if t.params["kernels"] == fused]
    assert cand.config["knobs"]["kernels"] == fused
    if drifting:
        assert cand.state == TrialState.INFEASIBLE and cand.error_class == "numerics"
        assert "away from bf16 with the unfused loss" in (cand.error_message or "")
        assert rec["knobs"]["kernels"] == "none"
    else:
        assert rec["knobs"]["kernels"] == fused and rec["numerics"]["passed"]
        text = rec["numerics"]["text"]
        assert text.startswith(f"bf16 with {said}: loss within"), text
        assert "of bf16 with the unfused loss" in text


def test_the_check_needs_a_numerics_changing_precision_the_target_runs() -> None:
    space = parse_space({"name": "s", "knobs": {"precision": ["bf16", "fp8-tensorwise"]}})
    assert space_changes_numerics(space, H200)
    assert not space_changes_numerics(space, Target("cuda", 1, "A100", (8, 0), 80.0))
    assert not space_changes_numerics(space, Target("cpu", 0))
    fixed = parse_space(
        {"name": "s", "knobs": {"micro_batch_size": [1]}, "fixed": {"precision": "tf32"}}
    )
    assert space_changes_numerics(fixed, H200)
    eight_bit = parse_space({"name": "s", "knobs": {"optimizer": ["adamw-fused", "adamw-8bit"]}})
    assert space_changes_numerics(eight_bit, Target("cpu", 0))  # 8-bit moments: any device
    fused = parse_space({"name": "s", "knobs": {"kernels": ["none", "fused-ce", "liger"]}})
    assert space_changes_numerics(fused, H200)
    assert not space_changes_numerics(fused, Target("cpu", 0))  # Liger's kernels: CUDA only


def test_a_reference_no_compiled_graph_serves_compiles_per_block() -> None:
    """The fp8 winner at bf16 is a graph nobody compiled: its reference compiles cold, per
    block (one block traced whatever the depth, the output region compiled as in the whole
    graph: the same arithmetic), not the whole model. Eager, already per block, or a factory
    model (its blocks may be no list of like modules): as it is. A graph the study compiled
    is still borrowed first."""
    llama = ModelSpec.resolve({"preset": "llama-1b"})
    winner = Knobs(precision="fp8-tensorwise", attention="cudnn", compile_mode="default")
    reference = winner.model_copy(update={"precision": Precision.BF16})
    cold = lambda k: cold_reference(k, llama)  # noqa: E731
    assert warm_reference(reference, [], cold).compile_scope == CompileScope.BLOCK
    assert warm_reference(reference, [], cold).model_dump(
        exclude={"compile_scope"}
    ) == reference.model_dump(exclude={"compile_scope"})
    expert = reference.model_copy(update={"attention": Attention.FLASH})
    assert warm_reference(reference, [expert], cold) == expert  # warm: borrowed whole
    assert warm_reference(reference, [reference], cold) == reference  # its own graph, warm
    eager = reference.model_copy(update={"compile_mode": CompileMode.NONE})
    assert cold_reference(eager, llama) == eager
    factory = llama.model_copy(update={"family": "factory", "factory": "m.py:build"})
    assert cold_reference(reference, factory) == reference


def test_the_reference_borrows_a_compiled_graphs_kernel_and_compile_mode() -> None:
    """Llama 3B's 10-minute study: the expert default (bf16, flash, compile default, mb 8) and
    the fp8 winner (cuDNN, mb 8) ran; the winner at bf16 is a graph nobody compiled (94 s cold
    on the H200), while the expert default's differs only in its kernel: the reference takes
    it, and its compile is warm. Nothing else may differ: not the micro-batch (another loss
    curve), not checkpointing (what fits), not the precision."""
    expert = Knobs(precision="bf16", attention="flash", compile_mode="default", micro_batch_size=8)
    fp8 = expert.model_copy(update={"precision": Precision.FP8_TENSORWISE})
    winner = fp8.model_copy(
        update={"attention": Attention.CUDNN, "compile_mode": CompileMode.REDUCE_OVERHEAD}
    )
    reference = winner.model_copy(update={"precision": Precision.BF16})
    warm = warm_reference(reference, [expert.model_copy(update={"grad_accum": 4}), fp8, winner])
    assert (warm.attention, warm.compile_mode) == (Attention.FLASH, CompileMode.DEFAULT)
    assert warm.model_dump(exclude={"attention", "compile_mode"}) == reference.model_dump(
        exclude={"attention", "compile_mode"}
    )
    # The reference itself ran: nothing to borrow. Nothing alike ran: itself.
    assert warm_reference(reference, [expert, reference]) == reference
    # The optimizer is not compiled with the model: a config that differs only in it lends
    # its graph (an 8-bit trial's, to a reference with fp32 moments), and the reference keeps
    # its own optimizer.
    eight = expert.model_copy(update={"optimizer": Optimizer.ADAMW_8BIT})
    assert warm_reference(reference, [eight]).optimizer == reference.optimizer
    assert warm_reference(reference, [eight]).attention == Attention.FLASH
    # Block scope compiles the same arithmetic in smaller graphs: it lends its graph too.
    block = expert.model_copy(update={"compile_scope": CompileScope.BLOCK})
    assert warm_reference(reference, [block]).compile_scope == CompileScope.BLOCK
    for other in (
        expert.model_copy(update={"kernels": Kernels.FUSED_CE}),
        expert.model_copy(update={"micro_batch_size": 4}),
        expert.model_copy(update={"checkpointing": Checkpointing.SELECTIVE}),
        expert.model_copy(update={"attention": Attention.MATH}),
        fp8,
    ):
        assert warm_reference(reference, [other]) == reference, other


def test_a_study_runs_its_reference_on_a_graph_it_compiled_and_says_so(sqlite_url: str) -> None:
    """The fp8 winner runs cuDNN; bf16 with cuDNN never completed here (the recording lacks
    it: an infra failure if tried), bf16 with flash did (the expert default): the reference
    runs that, and the numerics text says which kernel the reference ran."""
    knobs = {"precision": ["bf16", "fp8-tensorwise"], "attention": ["flash", "cudnn"]}
    tps = {("bf16", "flash"): 18_000.0, ("fp8-tensorwise", "flash"): 19_000.0}
    tps[("fp8-tensorwise", "cudnn")] = 20_000.0
    entries = [
        ({"precision": p, "attention": a}, measured(v, fingerprint=FAKE_GPU, wall_s=10.0))
        for (p, a), v in tps.items()
    ]
    trials, rec, _ = run_study(sqlite_url, knobs, max_trials=8, recorded=Landscape(entries))
    assert rec["knobs"]["precision"] == "fp8-tensorwise" and rec["knobs"]["attention"] == "cudnn"
    (ref,) = by_purpose(trials, "parity-ref")
    ran = ref.config["knobs"]
    assert (ran["precision"], ran["attention"]) == ("bf16", "flash")
    num = rec["numerics"]
    assert num["passed"], num
    assert num["text"].endswith("the reference ran flash attention, a graph the study had compiled")


def test_compare_curves_reads_the_tail() -> None:
    ref = parity_curve(50)
    assert compare_curves(ref, ref) == (0.0, 10)
    assert compare_curves(parity_curve(50, jitter=0.001), ref)[0] < TOLERANCE_REL
    assert compare_curves(parity_curve(50, drift_rel=0.1), ref)[0] > 0.08
    with pytest.raises(ValueError):
        compare_curves([], ref)


def test_a_live_view_before_the_check_says_not_checked_yet() -> None:
    """recommend() on rows alone: a numerics-changing best with no parity trial yet."""
    row = Trial(
        number=0,
        state=TrialState.COMPLETE.value,
        objective_value=20_000.0,
        purpose="search",
        params={"precision": "fp8-tensorwise"},
        config={"knobs": {"precision": "fp8-tensorwise"}, "model": {}},
        result=measured(20_000.0).model_dump(mode="json"),
    )
    rec = recommend([row], Objective.TOKENS_PER_S)
    assert rec is not None and rec["numerics"]["checked"] is False
    assert "not checked" in rec["numerics"]["text"]


def test_a_parity_trial_lost_in_a_restart_runs_again(sqlite_url: str) -> None:
    knobs = {"precision": ["bf16", "fp8-tensorwise"]}
    db = Database(sqlite_url)
    space = parse_space({"name": "numerics", "knobs": knobs, "fixed": {"attention": "efficient"}})
    model = ModelSpec.resolve({"preset": "tiny"})
    study_id = create_study(db, model=model, space=space, max_trials=20)
    executor = FakeParityReplay(landscape(knobs), list(knobs), target=H200)
    runner = StudyRunner(db, study_id, executor, poll_s=0.0, heartbeat_interval_s=3600)
    runner.start()
    # The candidate's parity steps run inside its headroom check, after the reference.
    while not any(f.purpose == "headroom" for f in runner.in_flight.values()):
        assert not runner.done, "the study should reach its numerics check"
        runner.step()
    lost = next(iter(runner.in_flight.values())).number
    with db.session() as s:  # the coordinator dies with the candidate's parity trial in flight
        StudyRepo(s).release(study_id, runner.owner)
    StudyRunner(db, study_id, executor, poll_s=0.0, heartbeat_interval_s=3600).run()
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
        rec = StudyRepo(s).require(study_id).recommendation
    parity = candidate_runs(trials)
    assert [t.state for t in parity] == [TrialState.LOST, TrialState.COMPLETE]
    assert parity[0].number == lost and not [t for t in trials if t.retry_of == lost]
    assert len(by_purpose(trials, "parity-ref")) == 1  # the finished half is kept
    assert rec is not None and rec["numerics"]["passed"] is True
    assert rec["numerics"]["parity_trials"][1] == parity[1].number


def test_parity_trials_run_one_micro_batch_per_step(sqlite_url: str) -> None:
    """The study accumulates 4 micro-batches per step; the parity steps (the reference's and
    the candidate's alike) run one, a quarter of the steps' time, at the same micro-batch. The
    reference is a parity trial at grad_accum 1; the candidate's steps run inside its headroom
    check, whose config keeps the study's accumulation for its timed steps (the worker runs
    the parity steps one micro-batch each: tests/workers/test_parity.py)."""
    knobs = {"precision": ["bf16", "fp8-tensorwise"]}
    trials, rec, _ = run_study(sqlite_url, knobs, fixed={"grad_accum": 4})
    assert rec["knobs"]["precision"] == "fp8-tensorwise" and rec["numerics"]["passed"] is True
    searched = [t for t in trials if t.purpose in SEARCH_TRIALS]
    assert searched and all(t.config["knobs"]["grad_accum"] == 4 for t in searched)
    (ref,) = by_purpose(trials, "parity-ref")
    (cand,) = candidate_runs(trials)
    assert ref.config["knobs"]["grad_accum"] == 1 and cand.purpose == "headroom"
    assert cand.config["knobs"]["grad_accum"] == 4
    assert cand.config["measure"]["parity_steps"] == PARITY_STEPS
    for t in (ref, cand):
        assert (
            t.config["knobs"]["micro_batch_size"] == searched[0].config["knobs"]["micro_batch_size"]
        )


def test_the_parity_trials_events_say_what_ran_and_their_loss(sqlite_url: str) -> None:
    """A parity-ref row carries the candidate's params; its event carries the knobs that ran
    (the reference precision) and the loss curve, which `tune` prints (cli/tune.py)."""
    db = Database(sqlite_url)
    knobs = {"precision": ["bf16", "fp8-tensorwise"]}
    space = parse_space({"name": "numerics", "knobs": knobs, "fixed": {"attention": "efficient"}})
    model = ModelSpec.resolve({"preset": "tiny"})
    study_id = create_study(db, model=model, space=space, max_trials=20)
    executor = FakeParityReplay(landscape(knobs), list(knobs), target=H200)
    events: list[Any] = []
    StudyRunner(
        db, study_id, executor, poll_s=0.0, heartbeat_interval_s=3600, on_event=events.append
    ).run()
    done = {e.purpose: e for e in events if e.kind == "finished"}
    ref, cand = done["parity-ref"], done["headroom"]  # the candidate's steps: in its check
    assert ref.params["precision"] == "fp8-tensorwise"  # the row names the candidate
    assert ref.ran == {"precision": "bf16"}  # what ran
    assert cand.ran == {} and cand.params["precision"] == "fp8-tensorwise"
    assert cand.tokens_per_s  # a measured trial too
    assert ref.loss_curve is not None and len(ref.loss_curve) == PARITY_STEPS
    assert cand.loss_curve is not None and len(cand.loss_curve) == PARITY_STEPS
    # A measured trial ran what its row names.
    seeds = [
        e for e in events if e.kind == "finished" and e.purpose in (Purpose.EXPERT_DEFAULT, "seed")
    ]
    assert seeds and all(e.ran == {} for e in seeds)


def test_without_a_headroom_check_the_candidate_runs_a_parity_trial(sqlite_url: str) -> None:
    """With the headroom check off (options.headroom 0) the candidate's parity steps run in a
    parity trial of their own, after the reference, as before the checks merged."""
    options = StudyOptions(headroom=0)
    trials, rec, _ = run_study(
        sqlite_url, {"precision": ["bf16", "fp8-tensorwise"]}, options=options
    )
    assert not by_purpose(trials, "headroom")
    ref, cand = by_purpose(trials, "parity-ref"), by_purpose(trials, "parity")
    assert len(ref) == 1 and len(cand) == 1 and ref[0].number < cand[0].number
    assert cand[0].config["knobs"]["grad_accum"] == 1
    assert rec["numerics"]["passed"] is True
    assert rec["numerics"]["parity_trials"] == [ref[0].number, cand[0].number]


def test_one_trial_left_goes_to_the_headroom_check_alone(sqlite_url: str) -> None:
    """The reference goes first only with two trials left for both checks; with one, the
    headroom check takes it (and runs no parity steps: no reference to compare with)."""
    from autotuner.search.numerics import headroom_plan
    from autotuner.study.measurements import group_measurements

    trials, _, _ = run_study(sqlite_url, {"precision": ["bf16", "fp8-tensorwise"]})
    measured = [t for t in trials if t.purpose in SEARCH_TRIALS]
    ranked = group_measurements(measured, StudyOptions())
    best = ranked[0]
    assert candidate_knobs_precision(best) == "fp8-tensorwise"
    assert headroom_plan(best, ranked, measured, room=2) == "reference first"
    assert headroom_plan(best, ranked, measured, room=None) == "reference first"
    assert headroom_plan(best, ranked, measured, room=1) == "alone"
    ref = by_purpose(trials, "parity-ref")
    assert headroom_plan(best, ranked, measured + ref, room=1) == "with parity"


def candidate_knobs_precision(group: Any) -> str:
    from autotuner.search.numerics import candidate_knobs

    return candidate_knobs(group).precision.value


def tied_landscape(fp8_speedup: float) -> Landscape:
    """bf16 and fp8 whose medians are `fp8_speedup` apart (each measured within ±1%)."""
    return Landscape(
        [
            ({"precision": p}, measured(tps, peak_mem_gib=8.0, fingerprint=FAKE_GPU, wall_s=10.0))
            for p, tps in (("bf16", 10_000.0), ("fp8-tensorwise", 10_000.0 * fp8_speedup))
        ]
    )


def test_on_a_tie_an_unchecked_winner_gives_way_to_the_reference_numerics(
    sqlite_url: str,
) -> None:
    """fp8 0.6% ahead of bf16, inside the ±1% noise, with no trials left for its check: bf16
    is recommended, fp8 is the runner-up, and both texts say why (a Llama 8B study on the H200
    ended so, 8-bit AdamW moments 1.6% ahead of fused AdamW inside a 2.4% noise)."""
    knobs = {"precision": ["bf16", "fp8-tensorwise"]}
    trials, rec, executor = run_study(
        sqlite_url, knobs, max_trials=2, recorded=tied_landscape(1.006)
    )
    assert not executor.parity
    assert rec["knobs"]["precision"] == "bf16"
    fp8 = next(t for t in trials if t.params["precision"] == "fp8-tensorwise")
    runner = rec["runner_up"]
    assert runner["trial_number"] == fp8.number and runner["tie"]
    assert "the runner-up is 0.6% faster" in runner["text"]
    num = rec["numerics"]
    assert num["precision"] == "bf16" and not num["changes_numerics"]
    assert num["preferred_over"] == {
        "trial_number": fp8.number,
        "precision": "fp8-tensorwise",
        "name": "fp8-tensorwise",
        "state": "not run",
    }
    assert f"trial #{fp8.number} (fp8-tensorwise) ties it" in num["text"]
    assert Recommendation.model_validate(rec).numerics == num
    # `best` names the faster runner-up as faster, not as a negative margin.
    view = {"best": rec, "study": "s", "status": "completed", "total_trials": len(trials)}
    console = Console(width=80, record=True)
    console.print(best_table(view))
    line = next(x for x in console.export_text().splitlines() if "margin" in x)
    assert f"trial #{fp8.number} 0.6% faster, noise ±1.0%: a tie" in line, line


def test_beyond_the_noise_the_unchecked_winner_stays_recommended(sqlite_url: str) -> None:
    knobs = {"precision": ["bf16", "fp8-tensorwise"]}
    _, rec, _ = run_study(sqlite_url, knobs, max_trials=2, recorded=tied_landscape(1.05))
    assert rec["knobs"]["precision"] == "fp8-tensorwise"
    assert "preferred_over" not in rec["numerics"]
    assert rec["runner_up"]["text"].startswith("wins by +5.0%")


def test_on_a_tie_a_winner_whose_check_passed_stays_recommended(sqlite_url: str) -> None:
    knobs = {"precision": ["bf16", "fp8-tensorwise"]}
    _, rec, executor = run_study(sqlite_url, knobs, recorded=tied_landscape(1.006))
    assert executor.parity
    assert rec["knobs"]["precision"] == "fp8-tensorwise"
    assert rec["numerics"]["passed"] and "preferred_over" not in rec["numerics"]
    assert rec["runner_up"]["tie"] and "either config will do" in rec["runner_up"]["text"]
