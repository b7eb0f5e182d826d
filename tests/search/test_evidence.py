"""The evidence's replay of the cost and throughput models (search/evidence.py): exactly the
search's at-launch predictions for a study of up to EXACT_REPLAY measured trials, a bounded
number of refits past that with errors that barely move, and the same report from a trial's
columns as from its JSON."""

from __future__ import annotations

import random
from typing import Any

from autotuner.search import evidence, evidence_replay
from autotuner.search.costmodel import CostModel, sequential_errors, throughput_errors
from autotuner.search.costmodel.throughput import ThroughputModel
from autotuner.search.rules import LearnedRules
from autotuner.spec import FailureClass, Knobs, TrialResult
from autotuner.storage.models import Trial, TrialState
from autotuner.types import utcnow
from tests.search.conftest import GPT2, H200, gpt2_landscape, gpt2_space

SPACE = gpt2_space()


def _trials(n: int, seed: int = 0) -> list[Trial]:
    """`n` trials drawn from the landscape (with repeats, each a little noisy), as rows."""
    rng = random.Random(seed)
    entries = gpt2_landscape().entries
    rows = []
    for number in range(n):
        params, result = rng.choice(entries)
        if result.tokens_per_s:
            noise = rng.uniform(0.98, 1.02)
            result = result.model_copy(
                update={"tokens_per_s": result.tokens_per_s * noise, "tokens_per_s_per_gpu": None}
            )
        knobs = SPACE.knobs_for(params, GPT2, 1)
        oom = result.failure_class == FailureClass.OOM
        rows.append(
            Trial(
                number=number,
                state=(TrialState.INFEASIBLE if oom else TrialState.COMPLETE).value,
                purpose="search",
                params=params,
                config={"knobs": knobs.model_dump(mode="json")},
                result=result.model_dump(mode="json"),
                tokens_per_s=result.tokens_per_s,
                peak_mem_gib=result.peak_mem_gib,
                peak_reserved_gib=result.peak_reserved_gib,
                memory_limit_gib=result.memory_limit_gib,
                error_class=result.failure_class.value if result.failure_class else None,
                finished_at=utcnow(),
            )
        )
    return rows


def _report(trials: list[Trial]) -> dict[str, Any]:
    return evidence.report(
        trials,
        model=GPT2,
        knobs=lambda p: SPACE.knobs_for(p, GPT2, 1),
        cost=CostModel(GPT2, num_gpus=1, on_cuda=True, limit_gib=139.8),
        throughput=ThroughputModel(GPT2, H200, 1),
        learned=LearnedRules(),
    )


def _exact(trials: list[Trial]) -> tuple[list[dict], list[dict]]:
    """The one-refit-per-trial replay (costmodel/accuracy.py)."""
    measured = [
        (t.number, Knobs.model_validate(t.config["knobs"]), TrialResult.model_validate(t.result))
        for t in trials
    ]
    memory = sequential_errors(GPT2, measured, num_gpus=1, on_cuda=True, limit_gib=139.8)
    speed = throughput_errors(ThroughputModel(GPT2, H200, 1), measured)
    return memory, speed


def test_a_short_study_replays_every_prediction_exactly() -> None:
    trials = _trials(90)
    memory, speed = _exact(trials)
    got = _report(trials)
    assert got["cost_model"]["trials"] == memory and memory
    assert got["throughput_model"]["trials"] == speed and speed
    assert any(t.error_class == "oom" for t in trials)  # the OOM lower bounds were replayed


def test_a_long_study_refits_a_bounded_number_of_times_with_the_same_errors() -> None:
    trials = _trials(800, seed=1)
    memory, speed = _exact(trials)
    got = _report(trials)
    for name, exact in (("cost_model", memory), ("throughput_model", speed)):
        entry = got[name]
        measured = len(exact)
        # 100 exact refits, then one per 25% growth: about ten more up to 800.
        assert entry["replay"]["refits"] <= evidence_replay.EXACT_REPLAY + 12, entry["replay"]
        assert entry["errors"]["measured"] == measured
        assert [e["trial_number"] for e in entry["trials"]] == [
            e["trial_number"] for e in exact[-evidence.SHOWN :]
        ]
        mine, theirs = entry["errors"], evidence.error_summary(exact)
        # The first half is replayed exactly up to the hundredth trial; the later predictions
        # come from a model at most 25% of the trials older, which knows what it needs.
        assert mine["first_prediction_rel_error"] == theirs["first_prediction_rel_error"]
        for key in ("median_abs_rel_error", "second_half_median_abs_rel_error"):
            assert abs(mine[key] - theirs[key]) <= 0.2 * theirs[key] + 0.002, (name, key)


def test_the_report_from_columns_equals_the_one_from_json(sqlite_url: str) -> None:
    """Rows read without their JSON (the end of a big study) give the same report; an OOM
    trial's result must be loaded (its lower bound is only there)."""
    from sqlalchemy import select
    from sqlalchemy.orm import defer

    from autotuner.storage.session import Database
    from autotuner.study.coordinator import create_study

    db = Database(sqlite_url)
    study_id = create_study(db, model=GPT2, space=SPACE, max_trials=200)
    trials = _trials(150, seed=2)
    with db.session() as s:
        for t in trials:
            t.study_id = study_id
            s.add(t)
    full = _report(_trials(150, seed=2))
    with db.read() as s:
        rows = list(
            s.scalars(
                select(Trial)
                .options(defer(Trial.config), defer(Trial.result))
                .where(Trial.study_id == study_id)
            )
        )
        from autotuner.study.columns import load_json

        load_json([t for t in rows if t.error_class == "oom"])
    assert _report(rows) == full


def test_predicting_between_refits_together_gives_each_trials_own_prediction() -> None:
    """The throughput replay predicts the trials between two refits in one batch: each entry
    is what the model, as fitted then, predicts for that trial alone (the loop before)."""
    trials = _trials(800, seed=2)
    knobs = {t.number: SPACE.knobs_for(t.params, GPT2, 1) for t in trials}
    measured = [
        (t.number, knobs[t.number], TrialResult.model_validate(t.result))
        for t in trials
        if t.result and t.state == TrialState.COMPLETE
    ]
    batched, refits = evidence_replay.replay_throughput(ThroughputModel(GPT2, H200, 1), measured)

    one_by_one, tm = [], ThroughputModel(GPT2, H200, 1)
    schedule = evidence_replay._Refits(lambda: tm.measured, tm.refit)
    for number, k, result in measured:
        if result.tokens_per_s and "predicted" not in result.notes:
            schedule.before_prediction()
            pred = tm.predict(k)
            one_by_one.append(
                {
                    "trial_number": number,
                    "predicted_tokens_per_s": round(pred.tokens_per_s, 1),
                    "predicted_sd": round(pred.sd, 1),
                    "measured_tokens_per_s": round(result.tokens_per_s, 1),
                    "rel_error": round(pred.tokens_per_s / result.tokens_per_s - 1.0, 4),
                }
            )
        tm.observe(k, result, fit=False)
        schedule.after_observe()
    assert batched == one_by_one and len(batched) > 500
    assert refits == schedule.count > evidence_replay.EXACT_REPLAY  # batches past the exact part
