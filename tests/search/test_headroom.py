"""Memory headroom (search/headroom.py, headroom_check.py) on the replay executor: a config that
fits with 2% to spare is tight, never recommended, and the recommendation shows the margin; the
winner's headroom check (an evaluation pass and a checkpoint save) moves the recommendation on
when it breaks the headroom; the screen skips only configs confidently over it."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from autotuner.api.schemas import Recommendation, TrialView
from autotuner.cli.render import best_table, trials_table
from autotuner.executors.base import Target
from autotuner.executors.replay import Landscape, ReplayExecutor
from autotuner.options import StudyOptions
from autotuner.purpose import SEARCH_TRIALS, Purpose
from autotuner.search.context import SearchContext
from autotuner.search.costmodel import CostModel
from autotuner.search.costmodel.calibration import CUDA_CONTEXT_GIB
from autotuner.search.screen import HEADROOM, Z_PRUNE, Screen
from autotuner.search.space import parse_space
from autotuner.spec import Knobs, ModelSpec
from autotuner.storage.models import Trial
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.columns import memory_record
from autotuner.study.coordinator import StudyRunner, create_study
from autotuner.study.labels import trial_label
from autotuner.study.trial_list import memory_judgement
from autotuner.study.views import trial_view
from tests.fakes import FAKE_GPU, FakeHeadroomReplay, measured

LIMIT = 80.0
GPU = Target("cuda", 1, "FakeGpu H200", (9, 0), LIMIT)
# micro-batch -> (tokens/s, share of the limit its peak needs: reserved + CUDA context)
POINTS = {4: (10_000.0, 0.50), 8: (12_000.0, 0.85), 16: (14_000.0, 0.98)}
KNOBS = {"micro_batch_size": list(POINTS)}


def landscape() -> Landscape:
    entries = []
    for mb, (tps, share) in POINTS.items():
        reserved = share * LIMIT - CUDA_CONTEXT_GIB
        result = measured(
            tps,
            peak_mem_gib=reserved * 0.97,
            peak_reserved_gib=reserved,
            memory_kind="cuda",
            memory_limit_gib=LIMIT,
            fingerprint=FAKE_GPU,
            wall_s=10.0,
        )
        entries.append(({"micro_batch_size": mb}, result))
    return Landscape(entries)


def _run(
    sqlite_url: str, eval_factor: dict[int, float] | None, max_trials: int, opts: StudyOptions
) -> tuple[Database, str, FakeHeadroomReplay]:
    """A study of the fake GPU's landscape run to its end: (database, study id, executor)."""
    db = Database(sqlite_url)
    space = parse_space({"name": "headroom", "knobs": KNOBS, "fixed": {"attention": "efficient"}})
    study_id = create_study(
        db,
        model=ModelSpec.resolve({"preset": "tiny"}),
        space=space,
        max_trials=max_trials,
        options=opts,
    )
    executor = FakeHeadroomReplay(landscape(), list(KNOBS), target=GPU, eval_factor=eval_factor)
    StudyRunner(db, study_id, executor, poll_s=0.0, heartbeat_interval_s=3600).run()
    return db, study_id, executor


def run_study(
    sqlite_url: str, *, eval_factor: dict[int, float] | None = None, **options: Any
) -> tuple[list[Trial], dict[str, Any], FakeHeadroomReplay, StudyOptions]:
    opts = StudyOptions(**options)
    db, study_id, executor = _run(sqlite_url, eval_factor, 10, opts)
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
        rec = StudyRepo(s).require(study_id).recommendation
    assert rec is not None
    return trials, rec, executor, opts


def _mb(t: Trial) -> int:
    return int(t.params["micro_batch_size"])


def test_a_config_with_2_percent_to_spare_is_tight_and_the_margin_is_shown(
    sqlite_url: str,
) -> None:
    trials, rec, executor, options = run_study(sqlite_url)
    # mb 16 is the fastest but leaves 2% of the memory free: not recommended.
    assert rec["params"] == {"micro_batch_size": 8}
    hr = rec["headroom"]
    assert hr["enforced"] and hr["headroom_rel"] == 0.10 and hr["limit_gib"] == LIMIT
    # The peak shown is the largest seen: its headroom check's, with the evaluation pass and
    # the checkpoint (the fake adds 5% to the reserved peak), plus the CUDA context.
    peak = (0.85 * LIMIT - CUDA_CONTEXT_GIB) * 1.05 + CUDA_CONTEXT_GIB
    assert abs(hr["peak_gib"] - peak) < 1e-6 and abs(hr["usable_gib"] - 72.0) < 1e-6
    assert abs(hr["free_rel"] - (1 - peak / LIMIT)) < 1e-6
    assert abs(hr["spare_gib"] - (72.0 - peak)) < 1e-6
    assert "10.8% free, headroom 10% kept (0.6 GiB to spare)" in hr["text"], hr["text"]
    [over] = hr["passed_over"]
    tight = next(t for t in trials if _mb(t) == 16 and t.purpose in SEARCH_TRIALS)
    assert over["trial_number"] == tight.number
    assert over["why"] == "leaves 2.0% free, less than the 10% headroom"
    # The tight trial stays in the table, marked.
    view = trial_view(tight, options=options)
    assert view["tight"] and abs(view["memory_free_rel"] - 0.02) < 1e-6
    assert trial_label(view) == "tight" and TrialView.model_validate(view).tight
    assert not trial_view(tight)["tight"]  # without the study's options, nothing to judge
    # The winner was checked once with an evaluation pass and a checkpoint save, and held.
    [check] = [t for t in trials if t.purpose == "headroom"]
    assert len(executor.checks) == 1 and executor.checks[0].measure.headroom_check
    assert _mb(check) == 8 and check.objective_value is None
    assert hr["check"]["state"] == "passed" and hr["check"]["trial_number"] == check.number
    assert rec["trial_number"] != check.number
    # Shown: the API declares it, `best` prints peak, limit and headroom side by side.
    assert Recommendation.model_validate(rec).headroom == hr
    text = _render(
        best_table({"best": rec, "study": "s", "status": "completed", "total_trials": 9})
    )
    assert "71.4 GiB of 80.0 GiB limit (10.8% free" in text, text
    assert "10% kept: 0.6 GiB to spare" in text, text
    assert f"trial #{tight.number} was faster but leaves 2.0% free" in text, text
    views = [trial_view(t, options=options) for t in trials]
    table = _render(trials_table({"id": "s", "status": "completed"}, views))
    assert "tight: leaves 2.0% of the GPU memory free" in table, table
    # The default headroom (not stored in the options JSON): judged so by the trial list too.
    assert _listed(sqlite_url, trials[0].study_id) == _judged(trials, options)


def _listed(sqlite_url: str, study_id: str) -> dict[int, tuple[bool, float | None]]:
    """Each trial's (tight, memory left free) as a trial list says it: by the study's headroom
    alone, read out of its stored options (storage/reads.py: no options model)."""
    from autotuner.study.trial_reads import list_trials

    listed = list_trials(Database(sqlite_url), study_id)
    return {v["number"]: (v["tight"], v["memory_free_rel"]) for v in listed}


def _judged(trials: list[Trial], options: StudyOptions) -> dict[int, tuple[bool, float | None]]:
    """The same judged with the study's options model (views.trial_view)."""
    views = (trial_view(t, options=options) for t in trials)
    return {v["number"]: (v["tight"], v["memory_free_rel"]) for v in views}


def test_a_winner_whose_eval_and_checkpoint_break_the_headroom_is_passed_over(
    sqlite_url: str,
) -> None:
    # With the evaluation pass and checkpoint, mb 8 needs 12% more: 4.9% free, under 10%.
    trials, rec, executor, _ = run_study(sqlite_url, eval_factor={8: 1.12})
    assert [c.knobs.micro_batch_size for c in executor.checks] == [8, 4]
    checks = [t for t in trials if t.purpose == "headroom"]
    assert [_mb(t) for t in checks] == [8, 4]  # the next eligible config is checked in turn
    assert rec["params"] == {"micro_batch_size": 4}
    hr = rec["headroom"]
    assert hr["check"]["state"] == "passed" and hr["check"]["trial_number"] == checks[1].number
    whys = {p["trial_number"]: p["why"] for p in hr["passed_over"]}
    failed = next(t.number for t in trials if _mb(t) == 8 and t.purpose in SEARCH_TRIALS)
    assert whys[failed].startswith("failed its headroom check"), whys
    assert "less than the 10% headroom" in whys[failed]
    assert "was faster but failed its headroom check" in hr["text"]
    # The check that failed is no runner-up either.
    assert rec["runner_up"] is None or rec["runner_up"]["params"] != {"micro_batch_size": 8}


def test_no_headroom_asked_recommends_the_fastest_and_runs_no_check(sqlite_url: str) -> None:
    trials, rec, executor, _ = run_study(sqlite_url, headroom=0.0)
    assert rec["params"] == {"micro_batch_size": 16}
    assert not executor.checks and not [t for t in trials if t.purpose == "headroom"]
    assert rec["headroom"]["check"] is None and "no headroom asked" in rec["headroom"]["text"]


def test_a_recording_keeps_the_headroom_without_its_check(sqlite_url: str) -> None:
    """A landscape recording (bench/record_landscape.py) keeps the headroom to judge and screen
    configs, and spends no GPU time re-running its best: the headroom check is off."""
    trials, rec, executor, _ = run_study(sqlite_url, headroom_check=False)
    assert rec["params"] == {"micro_batch_size": 8}  # mb 16 is tight all the same
    assert not executor.checks and not [t for t in trials if t.purpose == "headroom"]
    hr = rec["headroom"]
    assert hr["check"] is None and "the study turned the check off" in hr["text"], hr["text"]
    text = _render(
        best_table({"best": rec, "study": "s", "status": "completed", "total_trials": 9})
    )
    assert "off (headroom_check=false)" in text, text


def test_the_screen_skips_only_configs_confidently_over_the_headroom() -> None:
    model = ModelSpec.resolve({"preset": "gpt2-124m"})
    knobs = Knobs(micro_batch_size=32, attention="efficient")
    pred = CostModel(model, num_gpus=1, on_cuda=True, limit_gib=None).predict(knobs)
    low, high = pred.need_gib - Z_PRUNE * pred.sd_gib, pred.need_gib

    def screen(limit: float, headroom: float) -> Any:
        cost = CostModel(model, num_gpus=1, on_cuda=True, limit_gib=limit)
        return Screen(
            SearchContext(
                space=parse_space({"name": "s", "knobs": {"micro_batch_size": [32]}}),
                model=model,
                target=Target("cuda", 1, "FakeGpu H200", (9, 0), limit),
                gpus=1,
                options=StudyOptions(headroom=headroom),
                cost=cost,
            )
        ).check({"micro_batch_size": 32}, knobs)

    # Even the optimistic end needs 95% of the limit: surely over 90%, surely under 100%.
    prune = screen(low / 0.95, 0.10)
    assert prune is not None and prune.error_class == HEADROOM, prune
    assert "predicted to break the 10% memory headroom" in prune.message
    assert screen(low / 0.95, 0.0) is None  # no headroom: it fits the limit
    # Only the mean is over 90% (its optimistic end is not): worth measuring.
    assert screen(high / 0.93, 0.10) is None
    # On the CPU the headroom is not enforced.
    cpu = Screen(
        SearchContext(
            space=parse_space({"name": "s", "knobs": {"micro_batch_size": [32]}}),
            model=model,
            target=Target("cpu", 0),
            gpus=1,
            options=StudyOptions(),
            cost=CostModel(model, num_gpus=1, on_cuda=False, limit_gib=low / 0.95),
        )
    )
    assert cpu.check({"micro_batch_size": 32}, knobs) is None or (
        cpu.check({"micro_batch_size": 32}, knobs).error_class != HEADROOM  # type: ignore[union-attr]
    )


def _render(renderable: Any) -> str:
    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


def test_trials_passed_over_for_one_reason_are_named_together() -> None:
    """A GPT-2 study on the H200 passed over three micro-batch-128 trials, each leaving 7.7%
    free, and its text said so three times; one reason, one clause, in the given order."""
    from autotuner.search.headroom_check import passed_over_text

    why = "leaves 7.7% free, less than the 10% headroom"
    passed = [{"trial_number": n, "why": why} for n in (7, 10, 6)]
    passed.append({"trial_number": 3, "why": "failed its headroom check"})
    assert passed_over_text(passed) == [
        f"trials #7, #10 and #6 were faster but each {why}",
        "trial #3 was faster but failed its headroom check",
    ]
    assert passed_over_text(passed[:1]) == [f"trial #7 was faster but {why}"]


def test_a_study_whose_every_measured_trial_is_tight_says_what_to_do(sqlite_url: str) -> None:
    """A 60% headroom on the fake 80 GiB GPU: every micro-batch's peak leaves less free
    (50-98% needed), as Llama 8B's on one H200 would leave 8.8% under a 10% headroom. Nothing
    is recommended, and `best` says why and how to accept a tight config, not "no trial"."""
    from autotuner.study import operations

    db, study_id, _ = _run(sqlite_url, None, 6, StudyOptions(headroom=0.6))
    view = operations.get_best(db, study_id)
    assert view["best"] is None and view["completed_trials"] >= 1
    text = _render(best_table(view))
    assert "nothing to recommend" in text, text
    # It names the fastest and the headroom that would accept it: a rerun's, not a guess.
    tight = view["tight_fastest"]
    assert tight is not None and tight["headroom"] == 0.6
    assert 0 < tight["headroom_accepting"] <= tight["memory_free_rel"] < 0.6
    assert f"#{tight['trial_number']} " in text
    assert f"--headroom {tight['headroom_accepting']:g}" in text, text
    with db.read() as s:
        fastest = TrialRepo(s).get(study_id, tight["trial_number"])
        assert fastest is not None and fastest.tokens_per_s == max(
            t.tokens_per_s or 0 for t in TrialRepo(s).list(study_id)
        )
        record = memory_record(fastest)
    assert record is not None
    for headroom, is_tight in ((0.6, True), (tight["headroom_accepting"], False)):
        _, judged = memory_judgement("complete", record, StudyOptions(headroom=headroom))
        assert judged is is_tight, headroom
    # The stored 60% headroom: the trial list's judgement is the options model's.
    with db.read() as s:
        every = TrialRepo(s).list(study_id)
    listed = _listed(sqlite_url, study_id)
    assert listed == _judged(every, StudyOptions(headroom=0.6)) and listed[fastest.number][0]
    # The service's answer carries it too (BestView), for `best --server` and the API.
    from fastapi.testclient import TestClient

    from autotuner.api.app import ServiceSettings, create_app

    app = create_app(ServiceSettings(db_url=sqlite_url, coordinator=False))
    with TestClient(app) as client:
        assert client.get(f"/api/studies/{study_id}/best").json()["tight_fastest"] == tight
        # `best --headroom`: the measured trials re-judged, nothing run, nothing stored.
        url = f"/api/studies/{study_id}/best?headroom={tight['headroom_accepting']}"
        rejudged = client.get(url).json()
        assert client.get(f"/api/studies/{study_id}/best?headroom=0.95").status_code == 422
    best = rejudged["best"]
    assert best is not None and best["trial_number"] == tight["trial_number"], rejudged
    assert best["rejudged"]["study_headroom"] == 0.6 and rejudged["tight_fastest"] is None
    assert operations.get_best(db, study_id)["best"] is None  # the study's own is unchanged
    table = _render(best_table(operations.get_best(db, study_id, headroom=0.0)))
    assert "Re-judged at a 0.0% headroom" in table and "autotuner export" not in table, table
    with pytest.raises(operations.UserError, match=r"0 to 0\.9"):
        operations.get_best(db, study_id, headroom=0.95)
    from typer.testing import CliRunner

    from autotuner.cli import app as cli

    said = CliRunner().invoke(
        cli, ["best", study_id, "--db", sqlite_url, "--headroom", str(tight["headroom_accepting"])]
    )
    assert said.exit_code == 0 and "Re-judged at a" in said.output, said.output


def test_an_expert_default_kept_out_for_memory_is_still_the_yardstick(sqlite_url: str) -> None:
    # Trial #0, the expert default, is micro-batch 16: measured, but tight. The comparison
    # says how the winner compares with it and why it is not the recommendation, where it
    # once said the expert default "was not measured" (the H200 Llama 8B study of 2026-12-05).
    trials, rec, _, _ = run_study(sqlite_url)
    expert = next(t for t in trials if t.number == 0)
    assert expert.purpose == Purpose.EXPERT_DEFAULT and _mb(expert) == 16
    entry = rec["vs_expert_default"]
    assert entry["objective_value"] == POINTS[16][0]
    assert entry["speedup"] == pytest.approx(POINTS[8][0] / POINTS[16][0], abs=1e-4)
    words = "leaves 2.0% free, less than the 10% headroom"
    assert entry["not_recommended"] == words
    assert entry["text"] == (
        f"0.86x the expert default (trial #0, 14,000), which is not recommended: it {words}; "
        "at 0.5x its global batch: another training run"
    )
    assert "not measured" not in entry["text"]


def _study_of(
    sqlite_url: str, entries: list[Any], space: dict[str, Any], *, max_trials: int
) -> tuple[str, list[Trial], dict[str, Any] | None]:
    """A study of `space` on the fake GPU's landscape `entries`, run to its end."""
    db = Database(sqlite_url)
    study_id = create_study(
        db,
        model=ModelSpec.resolve({"preset": "tiny"}),
        space=parse_space(space),
        max_trials=max_trials,
    )
    knobs = list(space["knobs"])
    executor = FakeHeadroomReplay(Landscape(entries), knobs, target=GPU, eval_factor={})
    StudyRunner(db, study_id, executor, poll_s=0.0, heartbeat_interval_s=3600).run()
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
        return study_id, trials, StudyRepo(s).require(study_id).recommendation


def test_a_config_tight_only_for_the_default_allocators_waste_is_recommended_with_expandable(
    sqlite_url: str,
) -> None:
    """The same allocated peak, two allocators: the default one reserves 12% over it (Llama 8B
    with 8-bit AdamW at micro-batch 1 on the H200 reserved 16% over), expandable segments 1%.
    Micro-batch 16 is tight with the first and keeps the headroom with the second, so the study
    recommends it with expandable segments, and its export sets the variable torch reads."""
    from autotuner.study.export import render

    frag = {"default": 1.12, "expandable": 1.01}
    entries = []
    for mb, tps in ((8, 12_000.0), (16, 14_000.0)):
        allocated = 0.82 * LIMIT if mb == 16 else 0.5 * LIMIT
        for allocator, ratio in frag.items():
            result = measured(
                tps,
                peak_mem_gib=allocated,
                peak_reserved_gib=allocated * ratio,
                memory_kind="cuda",
                memory_limit_gib=LIMIT,
                fingerprint=FAKE_GPU,
                wall_s=10.0,
            )
            entries.append(({"micro_batch_size": mb, "allocator": allocator}, result))
    knobs = {"micro_batch_size": [8, 16], "allocator": ["default", "expandable"]}
    space = {"name": "alloc", "knobs": knobs, "fixed": {"attention": "efficient"}}
    study_id, trials, rec = _study_of(sqlite_url, entries, space, max_trials=10)
    assert rec is not None and rec["params"] == {"micro_batch_size": 16, "allocator": "expandable"}
    tight = [t for t in trials if t.params == {"micro_batch_size": 16, "allocator": "default"}]
    assert all(trial_view(t, options=StudyOptions())["tight"] for t in tight)
    # Micro-batch 8 keeps the headroom with the default allocator: its expandable twin, the
    # same speed, is never launched (pruned as dominated, no GPU time).
    twins = [t for t in trials if t.params == {"micro_batch_size": 8, "allocator": "expandable"}]
    assert twins and all(t.state == "pruned" and t.error_class == "dominated" for t in twins)
    assert "allocator=expandable changes only what is reserved" in (twins[0].error_message or "")
    assert rec["headroom"]["check"]["state"] == "passed", rec["headroom"]
    best = next(t for t in trials if t.number == rec["trial_number"])
    env = render(rec, "env", study_id=study_id, config=best.config)
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in env.splitlines()
    table = _render(
        best_table({"best": rec, "study": "s", "status": "completed", "total_trials": 4})
    )
    assert "expandable" in table, table


def test_a_study_searching_the_allocator_does_not_measure_twins_that_fit_either_way(
    sqlite_url: str,
) -> None:
    """The allocator's mode changes what is reserved, not the speed: on a GPT-2 landscape that
    fits with the default allocator, a study over a space with the knob measured 10 pairs of
    twins (the same config under both modes) in its first 20 trials before the screen knew
    that. Now none: each config runs under one allocator."""
    import json

    from tests.search.conftest import GPT2, H200, KNOBS, gpt2_landscape, gpt2_space

    knobs = {**KNOBS, "allocator": ["default", "expandable"]}
    db = Database(sqlite_url)
    study_id = create_study(db, model=GPT2, space=gpt2_space(knobs), max_trials=25)
    executor = ReplayExecutor(gpt2_landscape(knobs), list(knobs), target=H200)
    StudyRunner(db, study_id, executor, poll_s=0.0, heartbeat_interval_s=3600).run()
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
    ran = [t for t in trials if t.state == "complete" and t.purpose in SEARCH_TRIALS]
    assert len(ran) >= 10
    rest = [json.dumps({k: v for k, v in t.params.items() if k != "allocator"}) for t in ran]
    assert len(set(rest)) == len(rest), "a config measured under both allocator modes"


def _twin_study() -> tuple[list[Any], dict[str, Any]]:
    """A landscape and space whose expert default and cuDNN seed ask for expandable segments
    where the default allocator surely keeps the headroom: both are pruned for their twins."""
    result = measured(
        12_000.0,
        peak_mem_gib=0.3 * LIMIT,
        peak_reserved_gib=0.31 * LIMIT,
        memory_kind="cuda",
        memory_limit_gib=LIMIT,
        fingerprint=FAKE_GPU,
        wall_s=10.0,
    )
    kernels = ["efficient", "flash", "cudnn", "math"]
    entries = [
        ({"micro_batch_size": 8, "allocator": a, "attention": k}, result)
        for a in ("default", "expandable")
        for k in kernels
    ]
    knobs = {"micro_batch_size": [8], "allocator": ["default", "expandable"], "attention": kernels}
    space = {
        "name": "alloc-default",
        "knobs": knobs,
        "defaults": {"allocator": "expandable", "attention": "efficient"},
    }
    return entries, space


class _Killed(BaseException):
    """The coordinator's process dies here (kill -9, as the fault tests do it for real)."""


def test_the_expert_defaults_twin_runs_after_a_restart_between_its_prune_and_its_launch(
    sqlite_url: str,
) -> None:
    """The coordinator dies after pruning the expert default for its twin and before launching
    the twin. The pruned row marks the expert default as attempted, so the restarted one drops
    it from its queue; it used to lose the twin with it, and the study its yardstick. The
    stored seed plan now names the twin in its place."""
    entries, space = _twin_study()
    db = Database(sqlite_url)
    study_id = create_study(
        db, model=ModelSpec.resolve({"preset": "tiny"}), space=parse_space(space), max_trials=6
    )
    knobs = list(space["knobs"])
    executor = FakeHeadroomReplay(Landscape(entries), knobs, target=GPU, eval_factor={})
    runner = StudyRunner(db, study_id, executor, poll_s=0.0, heartbeat_interval_s=3600)

    def killed(*_: Any) -> bool:
        raise _Killed

    runner._too_late = killed  # type: ignore[method-assign]  # the twin's launch is next
    runner.start()
    with pytest.raises(_Killed):
        while True:
            runner.step()
    with db.read() as s:
        rows = TrialRepo(s).list(study_id)
    assert [(t.state, t.params["allocator"]) for t in rows] == [("pruned", "expandable")]
    with db.session() as s:
        StudyRepo(s).release(study_id, runner.owner)
    executor = FakeHeadroomReplay(Landscape(entries), knobs, target=GPU, eval_factor={})
    StudyRunner(db, study_id, executor, poll_s=0.0, heartbeat_interval_s=3600).run()
    with db.read() as s:
        trials = TrialRepo(s).list(study_id)
        rec = StudyRepo(s).require(study_id).recommendation
    twin = trials[1]
    assert twin.params == {**trials[0].params, "allocator": "default"}
    assert twin.purpose == Purpose.EXPERT_DEFAULT and twin.state == "complete"
    assert rec is not None and rec["vs_expert_default"]["trial_number"] == twin.number


def test_an_unneeded_expandable_proposal_runs_as_its_default_twin(sqlite_url: str) -> None:
    """A seed (here the expert default, from the space's defaults) asking for expandable
    segments where the cost model is sure the default allocator keeps the headroom is pruned as
    dominated, and its default twin runs in its place: the seed's purpose survives (the Llama 8B
    8-bit seed, planned with expandable, became prunable once the expert default's measurement
    tightened the model)."""
    entries, space = _twin_study()
    _, trials, rec = _study_of(sqlite_url, entries, space, max_trials=6)
    # The expert default and the cuDNN seed, both with expandable segments, are pruned; each
    # one's default twin runs in its place, before the next seed (it once waited for every
    # seed queued with it).
    pruned, ran = trials[0:4:2], trials[1:4:2]
    for twin, other in zip(pruned, ran, strict=True):
        assert twin.params["allocator"] == "expandable" and twin.state == "pruned"
        assert "with the default allocator it keeps the headroom" in (twin.error_message or "")
        assert other.params == {**twin.params, "allocator": "default"}
        assert other.state == "complete"
    # The expert default's twin is the expert default (the recommendation's yardstick): it
    # once was trial #0, pruned here, and the expert default "was not measured".
    assert [t.purpose for t in trials[:4]] == [
        Purpose.EXPERT_DEFAULT,
        Purpose.EXPERT_DEFAULT,
        "seed",
        "seed",
    ]
    assert rec is not None and rec["vs_expert_default"]["trial_number"] == ran[0].number
