"""Studies that end with one reason (autotuner/study/ending.py), driven against a ReplayExecutor
whose every config answers the same failure, as a worker would report it."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from autotuner.executors.replay import Landscape, ReplayExecutor
from autotuner.spec import FailureClass, ModelSpec, TrialResult
from autotuner.storage.models import StudyStatus, TrialState
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import StudyRunner, create_study
from autotuner.study.operations import get_best
from tests.coordinator.test_coordinator_replay import KNOBS, MODEL, SPACE


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest) -> Database:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    return Database(url)


# A compile mode to vary: the expert default's alternative is the second seed, so the two
# slots start with two seeds (no proposal of the sampler's, which the rules may prune first).
TWO_SEEDS = {**KNOBS, "compile_mode": ["default", "reduce-overhead"]}


def _everywhere(result: TrialResult) -> Landscape:
    """Every config of the test space answers `result`."""
    names = list(TWO_SEEDS)
    configs = (dict(zip(names, v, strict=True)) for v in itertools.product(*TWO_SEEDS.values()))
    return Landscape([(p, result) for p in configs])


def _run(db: Database, result: TrialResult, trials: int = 12) -> tuple[str, ReplayExecutor]:
    space = SPACE.model_copy(update={"knobs": TWO_SEEDS})
    study_id = create_study(db, model=MODEL, space=space, max_trials=trials)
    executor = ReplayExecutor(_everywhere(result), list(TWO_SEEDS), slots=2)
    StudyRunner(db, study_id, executor, poll_s=0.0).run()
    return study_id, executor


def _study(db: Database, study_id: str) -> tuple[Any, list[Any]]:
    with db.read() as s:
        return StudyRepo(s).require(study_id), TrialRepo(s).list(study_id)


def test_an_environment_failure_stops_the_study_at_once_with_its_remedy(db: Database) -> None:
    """The first result says the worker cannot import what the model needs: the study fails
    there with that line; nothing retried, nothing else launched or left running."""
    missing = TrialResult.failure(
        FailureClass.ENVIRONMENT,
        "the worker cannot import transformers (ModuleNotFoundError: No module named "
        "'transformers'), which family 'hf' needs: pip install transformers in the workers' "
        "Python environment",
    )
    study_id, executor = _run(db, missing)
    study, trials = _study(db, study_id)
    assert study.status == StudyStatus.FAILED
    assert "pip install transformers" in study.error_message
    assert study.error_message.startswith("the worker's environment cannot run this study")
    # Two slots: the first two launched together; the one still running when the first
    # failure was recorded is cancelled with the study. No retry, no third trial.
    assert len(executor.submitted) == 2
    assert {t.state for t in trials} == {TrialState.FAILED.value}
    assert not any(t.retried for t in trials) and all(t.retry_of is None for t in trials)
    assert get_best(db, study_id)["error_message"] == study.error_message


def test_a_study_that_measured_nothing_fails_with_its_most_frequent_reason(db: Database) -> None:
    """Every config runs out of memory (38.8: an absurd model, in bounds): the study does not
    end `completed` with nothing; it fails, and says why once, counted."""
    oom = TrialResult.failure(
        FailureClass.OOM,
        "out of memory: DefaultCPUAllocator: can't allocate memory: you tried to allocate "
        "2199023255552 bytes",
        required_mem_gib=2048.0,
    )
    study_id, _ = _run(db, oom, trials=4)
    study, trials = _study(db, study_id)
    assert study.status == StudyStatus.FAILED, study.error_message
    message = study.error_message
    assert message.startswith("nothing was measured: "), message
    ran = [t for t in trials if t.state != TrialState.PRUNED.value]
    assert f"{len(ran)} trials failed" in message, message
    assert "the most frequent reason, oom in " in message and "(first #0)" in message, message
    assert "you tried to allocate" in message and "\n" not in message


def test_a_model_too_big_for_the_gpu_fails_the_study_without_launching_anything(
    db: Database,
) -> None:
    """38.8 on a GPU: an in-bounds but absurd model (Llama with d_model 32768, 120 layers:
    about 1.6e12 parameters) on an 80 GiB GPU. The cost model prunes every config; the study
    fails with that reason, rather than end `completed` with no message."""
    huge = ModelSpec.resolve(
        {"family": "llama", "n_layer": 120, "d_model": 32768, "n_head": 256,
         "vocab_size": 128000, "seq_len": 4096}
    )  # fmt: skip
    study_id = create_study(db, model=huge, space=SPACE, max_trials=12)
    executor = ReplayExecutor(_everywhere(TrialResult(status="ok", tokens_per_s=1.0)), list(KNOBS))
    StudyRunner(db, study_id, executor, poll_s=0.0).run()
    study, trials = _study(db, study_id)
    assert not executor.submitted and trials
    assert study.status == StudyStatus.FAILED
    message = study.error_message
    assert message.startswith("nothing was measured: every config was ruled out before launch")
    assert "oom (not run)" in message and "predicted out of memory" in message, message
    assert "over the 80.0 GiB limit" in message, message


@pytest.mark.parametrize(
    ("blamed", "said"),
    [
        ({}, "no config of this model can run (trial #0)"),
        ({"attention": "efficient"}, "the space fixes attention=efficient"),
    ],
)
def test_an_unsupported_result_no_searched_knob_escapes_stops_the_study(
    db: Database, blamed: dict[str, str], said: str
) -> None:
    """A refusal that blames no knob (the model cannot be built) or only knobs the space
    fixes (its attention) would refuse every config: the study stops at the first, rather
    than learn it value by value (1,951 trials in 3 minutes) or prune the rest one by one."""
    refused = TrialResult.failure(
        FailureClass.UNSUPPORTED,
        "user_model.py:build takes no `attend` argument, so the attention knob cannot choose "
        "its kernel: declare `attend` and call attend(q, k, v) for causal attention",
        unsupported_knobs=blamed,
    )
    study_id, executor = _run(db, refused)
    study, trials = _study(db, study_id)
    assert study.status == StudyStatus.FAILED
    assert said in study.error_message and "declare `attend`" in study.error_message
    assert len(executor.submitted) == 2 and not [t for t in trials if t.state == "pruned"]


def test_an_unsupported_value_of_a_searched_knob_is_learned_and_the_study_goes_on(
    db: Database,
) -> None:
    """Blaming a knob the space searches: other values may run, so the search learns the rule
    and goes on (as before), and the study ends on its own terms."""
    refused = TrialResult.failure(
        FailureClass.UNSUPPORTED,
        "no kernel for bf16 here",
        unsupported_knobs={"precision": "bf16"},
    )
    study_id = create_study(db, model=MODEL, space=SPACE, max_trials=6)
    names = list(KNOBS)
    entries = []
    for values in itertools.product(*KNOBS.values()):
        p = dict(zip(names, values, strict=True))
        if p["precision"] == "bf16":
            entries.append((p, refused))
        else:
            entries.append(
                (p, TrialResult(status="ok", tokens_per_s=1000.0 + p["micro_batch_size"]))
            )
    executor = ReplayExecutor(Landscape(entries), names)
    StudyRunner(db, study_id, executor, poll_s=0.0).run()
    study, trials = _study(db, study_id)
    assert study.status == StudyStatus.COMPLETED and study.error_message is None
    assert any(t.state == TrialState.COMPLETE.value for t in trials)
