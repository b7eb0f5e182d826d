"""The compile budget (MeasureSettings.compile_budget_s, workers/compile_budget.py) for real: a
compiled trial in a fresh process whose first step outlasts its budget stops itself and reports
`compile_error` with the budget as a lower bound of its compile; one within it measures."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from autotuner.spec import FailureClass, TrialStatus
from workers import compile_cache, preload_client
from workers.launch import run_trial_process
from workers.trial import run_trial

from .conftest import fast, make_config, start_preload_server


def _compiled(budget_s: float):
    return make_config(
        compile_mode="default", attention="flash", measure=fast(compile_budget_s=budget_s)
    )


@pytest.fixture(params=["fresh", pytest.param("forked", marks=pytest.mark.slow)])
def started(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """How the trial process starts: a fresh interpreter, or forked from a pre-imported worker
    of its own (a compile-cache root of its own keys another server than other tests use)."""
    monkeypatch.setenv(compile_cache.ROOT_ENV, str(tmp_path / "cache"))
    if request.param == "fresh":
        monkeypatch.setenv(preload_client.ENABLE_ENV, "0")
    else:  # slow: the server imports torch first
        start_preload_server()
    return str(request.param)


def test_a_compile_past_its_budget_stops_the_trial_as_a_compile_error(started: str) -> None:
    # inductor on the CPU takes seconds to compile even the tiny model; 0.2 s is far below.
    t0 = time.monotonic()
    result = run_trial_process(_compiled(0.2))
    took = time.monotonic() - t0
    assert result.process_start == started
    assert result.status == TrialStatus.FAILED, result
    assert result.failure_class == FailureClass.COMPILE_ERROR  # a config failure: not retried
    assert (result.error_message or "").startswith("compile budget: the first step")
    assert "still compiling after 0 s" in (result.error_message or "")
    assert result.compile_s == 0.2 and result.tokens_per_s is None
    assert result.wall_s is not None and result.wall_s <= took


@pytest.mark.slow  # a compile (warm when this process's in-process compiles ran first)
def test_a_compile_within_its_budget_measures() -> None:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    # The inductor cache of this test process, which its other compiles of the same tiny model
    # fill (test_knobs, the in-process test below): a trial outside a study would otherwise
    # compile cold in a cache of its own (38 s on a loaded CPU against 5 s warm). Whether the
    # budget's watchdog lets a compile finish does not depend on it; cold compiles are
    # test_compile_cache's.
    config = _compiled(600.0)
    result = run_trial_process(
        config.model_copy(update={"env": {"TORCHINDUCTOR_CACHE_DIR": cache_dir()}})
    )
    assert result.status == TrialStatus.OK, result.error_message
    assert result.compile_s is not None and result.compile_s < 600.0


@pytest.mark.slow  # a whole CPU compile
def test_in_process_there_is_no_budget_to_end_the_process() -> None:
    """Only a trial process has a result file for the watchdog to write; a caller of
    run_trial in its own process keeps running (the timeout of a launcher still applies).
    Compiled per block, the same compile also shows the result naming the regions it compiled
    one by one, which the recommendation tells the user's trainer to compile the same way."""
    config = _compiled(0.01)
    config = config.model_copy(
        update={"knobs": config.knobs.model_copy(update={"compile_scope": "block"})}
    )
    result = run_trial(config)
    assert result is not None and result.status == TrialStatus.OK, result
    regions = f"{config.model.n_layer} Block blocks and the output layer with its loss"
    assert result.compiled_regions == regions
    assert f"compile_scope block: {regions} compiled (default)" in result.notes
