"""The per-study compile cache, for real: compiled trials (inductor's C++ backend on the CPU)
in fresh processes, two of one study and one of another, and the recommendation's cold compile."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotuner.search.objective import Objective
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec, TrialResult, TrialStatus
from autotuner.storage.models import TrialState
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import create_study
from autotuner.study.recommend import recommend
from workers import compile_cache
from workers.launch import run_trial_process

from .conftest import make_config, start_preload_server

# The smallest model a trial trains (tests/workers/tiny_lm.py: an embedding and the output layer,
# 4 C++ kernels to build where a one-layer GPT-2 has 12): what this test asserts is which graphs
# a trial finds in its study's cache, and what it reports of them, whatever the graphs hold.
TINY_LM = ModelSpec.resolve(
    {
        "factory": "tests.workers.tiny_lm:build",
        "n_layer": 1,
        "d_model": 64,
        "n_head": 4,
        "vocab_size": 512,
        "seq_len": 64,
    }
)


def _compiled(study_id: str, number: int, grad_accum: int = 2, **measure):
    config = make_config(compile_mode="default", grad_accum=grad_accum)
    return config.model_copy(
        update={
            "model": TINY_LM,
            "study_id": study_id,
            "trial_number": number,
            "measure": config.measure.model_copy(update=measure),
        }
    )


def _store(db: Database, study_id: str, purpose: str, result: TrialResult) -> int:
    with db.session() as s:
        repo = TrialRepo(s)
        row = repo.create_running(
            study_id, params={"compile_mode": "default"}, config={}, purpose=purpose
        )
        repo.finish(row, TrialState.COMPLETE, result=result, objective_value=result.tokens_per_s)
        return row.number


@pytest.mark.slow  # two cold compiles and four warm: ~30 s alone, a minute on a loaded CPU
def test_a_study_compiles_once_and_the_recommendation_reports_the_cold_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str
) -> None:
    """One study's trials in forked trial processes: the first compiles cold, a second of
    the same config finds every graph, another study does not share them, a half-built kernel
    library is rebuilt, and the winner's numerics check runs find the measured config's graphs
    (one test: every cold compile is ~10 s of a loaded CPU)."""
    monkeypatch.setenv(compile_cache.ROOT_ENV, str(tmp_path / "cache"))
    # Inductor takes the CPU's vector ISA from the CPU's flags instead of probing each ISA with a
    # program of its own: four C++ builds in every empty cache (each study's first trial, ~6 s
    # one after another here) and a child process loading each build in every compiling trial,
    # ~20 s of this test that none of its asserts is about. A TORCH* variable: read at torch's
    # import, by the trials' pre-imported worker started below (keyed by it) and its forks.
    monkeypatch.setenv("TORCHINDUCTOR_VEC_ISA_OK", "1")
    # Forked from the pre-imported worker, which imported torch._dynamo and inductor's config
    # before any study's cache directory was known: the cache is still the trial's own.
    start_preload_server()
    first = run_trial_process(_compiled("st-one", 0))
    second = run_trial_process(_compiled("st-one", 1))
    other = run_trial_process(_compiled("st-two", 0))
    for r in (first, second, other):
        assert r.status == TrialStatus.OK, r.error_message
        assert r.process_start == "forked"
    # The study's first compile found nothing; the second found every graph in the cache.
    assert first.compile_cache == "cold" and first.compile_cache_misses
    assert second.compile_cache == "warm" and second.compile_cache_hits
    assert second.compile_s < first.compile_s
    # Another study does not share it: cold again (not the machine-wide default).
    assert other.compile_cache == "cold"
    inductor = tmp_path / "cache" / "st-one" / "inductor"
    measured_libraries = sorted(inductor.glob("*/*.so"))  # what the measured config loads
    assert measured_libraries

    # The winner's numerics check, as the endgame runs it (study/endgame.py), after the config
    # was measured with gradient accumulation: a parity trial at one micro-batch a step, and a
    # headroom check that runs the parity steps before its timed steps. Both report their
    # compile and find the measured trial's graphs in the study's cache. On the H200 the fp8
    # winner's parity trial spent ~140 s in its first step where the headroom check of the
    # same config compiled warm in 59 s: the synthetic micro-batches were views into one block
    # (workers/data.py), and parity trials recorded neither their compile nor the cache's hits
    # (bench/results/h200_session_20261202).
    parity = run_trial_process(_compiled("st-one", 2, grad_accum=1, parity_steps=6))
    both = run_trial_process(_compiled("st-one", 3, parity_steps=6, headroom_check=True))
    assert parity.status == both.status == TrialStatus.OK, (
        parity.error_message,
        both.error_message,
    )
    # The parity trial: its first step apart, its compile, warm.
    assert parity.loss_curve is not None and len(parity.loss_curve) == 6
    assert parity.compile_s is not None and parity.compile_s > 0
    assert parity.phases_s is not None and parity.phases_s["first_step"] >= parity.compile_s
    assert parity.compile_cache == "warm", (parity.compile_cache_hits, parity.compile_cache_misses)
    # The headroom check with the parity steps: they compile (warm); the timed steps at the
    # knobs' accumulation reuse the graphs; its compile_s is the parity steps'.
    assert both.loss_curve == parity.loss_curve  # the same steps from the same seed
    assert both.peak_mem_with_eval_ckpt_gib is not None and both.repeat_tokens_per_s
    assert both.compile_cache == "warm", (both.compile_cache_hits, both.compile_cache_misses)
    phases = both.phases_s or {}
    # Its compile_s: the parity steps' compile plus the warm-up's first step's excess over a
    # steady step, which is noise where the graphs are reused (on a loaded CPU it once put
    # compile_s 0.15 s above the parity phase): bounded by the two phases it comes from.
    assert both.compile_s is not None and both.compile_s > 0
    assert both.compile_s <= phases["parity"] + phases["first_step"]

    # A trial killed while the compiler wrote a kernel library leaves it truncated, with the
    # build's scratch folder: the next trial of the study removes it and builds it again
    # (without that: "ImportError: ...main.so: file too short", a compile_error).
    library = measured_libraries[0]
    library.write_bytes(b"")
    (library.parent / f"{library.name.removesuffix('.so')}_CxxBuild").mkdir()
    again = run_trial_process(_compiled("st-one", 4))
    assert again.status == TrialStatus.OK, again.error_message
    assert any(library.name in n and "half-built" in n for n in again.notes), again.notes
    assert library.stat().st_size > 0

    db = Database(sqlite_url)
    space = parse_space({"name": "compiled", "knobs": {"compile_mode": ["default"]}})
    study_id = create_study(
        db, model=ModelSpec.resolve({"preset": "tiny"}), space=space, max_trials=2
    )
    cold_number = _store(db, study_id, "search", first)
    _store(db, study_id, "remeasure", second)
    with db.read() as s:
        rec = recommend(TrialRepo(s).list(study_id), Objective.TOKENS_PER_S)
    assert rec is not None and rec["measurements"] == 2
    assert rec["compile_s"] == pytest.approx(first.compile_s)  # what a first run pays
    assert rec["compile"]["cold_trial"] == cold_number
    assert rec["compile"]["warm_s"] == pytest.approx(second.compile_s)
    assert "cold" in rec["compile"]["text"]


def test_a_winner_measured_only_warm_says_so(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    space = parse_space({"name": "compiled", "knobs": {"compile_mode": ["default"]}})
    study_id = create_study(
        db, model=ModelSpec.resolve({"preset": "tiny"}), space=space, max_trials=1
    )
    warm = TrialResult(
        status=TrialStatus.OK,
        tokens_per_s=1000.0,
        compile_s=2.0,
        compile_cache_hits=2,
        compile_cache_misses=0,
    )
    _store(db, study_id, "search", warm)
    with db.read() as s:
        rec = recommend(TrialRepo(s).list(study_id), Objective.TOKENS_PER_S)
    assert rec is not None and rec["compile_s"] is None  # no cold compile was measured
    assert rec["compile"]["cache"] == "warm"
    assert rec["compile"]["text"].startswith("not measured cold")
