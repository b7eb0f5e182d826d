"""The build phase's parts on a real CPU trial: where a trial's build time goes (a cuDNN trial's
build took 1.2-1.9 s on the H200 against flash's 0.2-0.4 s; split this way, 1.3-1.5 s of it is
the attention probe, which takes 0.21 s in a bare process: bench/results/h200_session_20261204b)."""

from __future__ import annotations

from autotuner.spec import FailureClass, TrialStatus
from workers import phases
from workers.trial import run_trial

from .conftest import fast, make_config

PARTS = ["checks", "probe", "model", "optimizer", "data"]


def test_a_trials_build_is_split_into_its_parts_in_order() -> None:
    result = run_trial(make_config())
    assert result.status == TrialStatus.OK, result.error_message
    parts = result.build_parts_s or {}
    assert list(parts) == PARTS and all(v >= 0 for v in parts.values()), parts
    assert parts["model"] > 0  # building the layers takes time on any machine
    # The parts are the build phase, less the few statements before the first of them; each
    # part is stored to 0.1 ms, so their sum may exceed the phase by that much a part.
    assert result.build_s is not None
    rounding = 0.0001 * len(parts) / 2
    assert -rounding <= result.build_s - sum(parts.values()) < 0.05, (result.build_s, parts)


def test_a_refused_config_reports_the_checks_it_got_through() -> None:
    result = run_trial(make_config(attention="cudnn"))  # no cuDNN attention on a CPU
    assert result.failure_class == FailureClass.UNSUPPORTED, result.error_message
    assert list(result.build_parts_s or {}) == ["checks"]  # refused before the probe


def test_a_trial_told_its_kernel_already_ran_skips_the_probe(monkeypatch) -> None:
    """MeasureSettings.attention_probe off (the coordinator's: a trial of the study already
    ran this kernel at this dtype): no probe part, and the probe is never called."""
    from workers import support

    calls: list[str] = []
    real = support.probe_attention
    monkeypatch.setattr(support, "probe_attention", lambda *a: calls.append("probe") or real(*a))
    result = run_trial(make_config(measure=fast(attention_probe=False)))
    assert result.status == TrialStatus.OK, result.error_message
    assert list(result.build_parts_s or {}) == [p for p in PARTS if p != "probe"]
    assert calls == []
    assert run_trial(make_config()).status == TrialStatus.OK and calls == ["probe"]


def test_the_part_clock_synchronises_before_each_mark() -> None:
    calls: list[int] = []
    clock = phases.Clock({}, 0.0, sync=lambda: calls.append(1))
    clock.mark("a")
    clock.mark("b")
    assert len(calls) == 2 and list(clock.phases) == ["a", "b"]
