"""The trial page reads like a report, not a dump: numbers rounded and with separators, a dash
for what was not measured (never `None`), timestamps to the second, losses to four digits; a
pruned trial is not shown as an error; a CPU study does not say "GPU(s) per trial"."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from autotuner.search.objective import Objective
from autotuner.search.space import parse_space
from autotuner.spec import FailureClass, Fingerprint, ModelSpec, Telemetry, TrialResult, TrialStatus
from autotuner.storage.models import TrialState
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import create_study
from autotuner.study.live import store_live_best
from tests.dashboard.conftest import make_app

CPU = Fingerprint(
    device_type="cpu", device_name="AMD EPYC", device_count=1, torch="2.13.0+cpu",
    python="3.11.7", hostname="vm", cpu="AMD EPYC",
)  # fmt: skip
# What a real CPU trial of the tiny preset recorded (make demo), raw floats and all.
CPU_RESULT = TrialResult(
    status=TrialStatus.OK,
    tokens_per_s=17008.03891717149,
    tokens_per_s_min=15531.709179993617,
    tokens_per_s_max=17706.238069360883,
    tokens_per_s_per_gpu=17008.03891717149,
    repeat_tokens_per_s=[17706.238069360883, 15531.709179993617, 17008.03891717149],
    steps_per_repeat=3,
    step_time_s=0.12041364733310427,
    peak_mem_gib=0.3789215087890625,
    memory_kind="cpu_rss",
    first_step_s=0.22719599299944093,
    compile_s=None,
    warmup_steps=10,
    warmup_s=1.4834408850001637,
    loss_first=6.02458381652832,
    loss_last=5.9137067794799805,
    fingerprint=CPU,
    notes=["warm-up did not settle within 10 steps"],
)
RAW = [
    r"\bNone\b",  # a missing value printed as Python's None
    r"\d\.\d{5,}",  # an unrounded float
    r"\d{2}:\d{2}:\d{2}\.\d",  # microseconds
    r"\+00:00",
    r"\de[+-]\d",  # scientific notation
]


def _assert_readable(text: str) -> None:
    for pattern in RAW:
        found = re.search(pattern, text)
        assert not found, f"{pattern!r}: ...{text[max(found.start() - 150, 0) : found.end() + 30]}"


def _main(html: str) -> str:
    """The page's visible report: <main> without the config's JSON (that one is verbatim)."""
    main = html[html.index("<main") : html.index("</main>")]
    return re.sub(r'<pre id="config">.*?</pre>', "", main, flags=re.S)


@pytest.fixture
def cpu_study(sqlite_url: str) -> tuple[Database, str]:
    db = Database(sqlite_url)
    space = parse_space({"name": "cpu", "knobs": {"micro_batch_size": [8, 32]}})
    study_id = create_study(
        db, model=ModelSpec.resolve({"preset": "tiny"}), space=space, max_trials=4
    )
    with db.session() as s:
        trials = TrialRepo(s)
        row = trials.create_running(
            study_id, params={"micro_batch_size": 32}, config={"num_gpus": 0}, worker="vm:8722"
        )
        trials.finish(
            row, TrialState.COMPLETE, result=CPU_RESULT, objective_value=CPU_RESULT.tokens_per_s
        )
        trials.create_pruned(
            study_id,
            params={"micro_batch_size": 8},
            config={"num_gpus": 0},
            error_class="unsupported",
            error_message="flash attention needs a CUDA device",
        )
        failed = trials.create_running(study_id, params={"micro_batch_size": 64}, config={})
        trials.finish(
            failed,
            TrialState.INFEASIBLE,
            result=TrialResult.failure(FailureClass.OOM, "CUDA out of memory", wall_s=3.0),
            error_class="oom",
            error_message="CUDA out of memory",
        )
    store_live_best(db, study_id, Objective.TOKENS_PER_S)
    return db, study_id


def test_a_measured_trial_reads_like_a_report(cpu_study: tuple[Database, str]) -> None:
    db, study_id = cpu_study
    page = TestClient(make_app(db)).get(f"/studies/{study_id}/trials/0")
    assert page.status_code == 200
    text = _main(page.text)
    _assert_readable(text)
    assert "17,008" in text
    assert "17,706 · 15,532 · 17,008" in text
    assert re.search(r'id="compile">no compile \(eager\), first step 0\.227 s', text)
    assert re.search(r'id="loss">6\.025 → 5\.914', text)
    assert re.search(r'id="started">2026-\d\d-\d\d \d\d:\d\d:\d\d UTC<', text)
    assert "0.379 GiB" in text and "resident memory" in text
    assert "tokens/s per GPU" not in text  # on a CPU there is no GPU to divide by
    assert "no peak FLOPs for a CPU" in text


def test_a_pruned_trial_is_not_an_error(cpu_study: tuple[Database, str]) -> None:
    db, study_id = cpu_study
    client = TestClient(make_app(db))
    pruned = client.get(f"/studies/{study_id}/trials/1").text
    assert 'id="why-pruned"' in pruned and "flash attention needs a CUDA device" in pruned
    assert 'class="card error"' not in pruned
    assert "before launch: no process ran" in pruned
    failed = client.get(f"/studies/{study_id}/trials/2").text
    assert 'class="card error" id="error"' in failed  # a real failure still is one
    _assert_readable(_main(pruned))


def test_gpu_telemetry_has_units(cpu_study: tuple[Database, str]) -> None:
    db, study_id = cpu_study
    telemetry = Telemetry(
        samples=57, sm_util_mean_pct=93.41234, mem_util_mean_pct=41.0, power_mean_w=612.3456,
        energy_j=8123.4, sm_clock_mean_mhz=1976.5, sm_clock_max_mhz=1980.0,
        temperature_max_c=61.0, nvml_used_gib=97.12345,
    )  # fmt: skip
    result = CPU_RESULT.model_copy(
        update={"telemetry": telemetry, "memory_kind": "cuda", "mfu": 0.4391234}
    )
    with db.session() as s:
        row = TrialRepo(s).create_running(study_id, params={"micro_batch_size": 32}, config={})
        TrialRepo(s).finish(row, TrialState.COMPLETE, result=result, objective_value=1.0)
    text = _main(TestClient(make_app(db)).get(f"/studies/{study_id}/trials/3").text)
    assert "93.4 %" in text and "612 W" in text and "8.12 kJ" in text
    assert "1,976 MHz" in text or "1,977 MHz" in text
    assert "97.1 GiB" in text and "43.9%" in text
    _assert_readable(text)


def test_a_cpu_study_does_not_speak_of_gpus(cpu_study: tuple[Database, str]) -> None:
    db, study_id = cpu_study
    page = TestClient(make_app(db)).get(f"/studies/{study_id}").text
    header = page[page.index("<h1") : page.index('id="progress"')]
    assert "trials on the CPU" in header
    assert "GPU" not in header
