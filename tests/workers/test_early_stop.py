"""The worker's side of early stop, on a real CPU trial: below the floor it stops after the
first timed repeat and says so; above it, the floor changes nothing."""

from __future__ import annotations

from autotuner.spec import TrialStatus
from workers.trial import run_trial

from .conftest import fast, make_config


def test_a_trial_below_the_floor_stops_after_its_first_repeat():
    measure = fast(repeats=3, abandon_below_tokens_per_s=1e12)  # no CPU reaches it
    result = run_trial(make_config(measure=measure))
    assert result.status == TrialStatus.OK, result.error_message
    assert result.stopped_early
    assert len(result.repeat_tokens_per_s) == 1  # the repeats it ran, not the 3 asked for
    assert result.tokens_per_s == result.repeat_tokens_per_s[0] < 1e12
    assert any(n.startswith("stopped early: repeat 1 of 3") for n in result.notes)
    assert result.loss_last < result.loss_first or result.steps_per_repeat == 1


def test_a_trial_above_the_floor_runs_every_repeat():
    result = run_trial(make_config(measure=fast(repeats=3, abandon_below_tokens_per_s=1.0)))
    assert result.status == TrialStatus.OK, result.error_message
    assert not result.stopped_early and len(result.repeat_tokens_per_s) == 3
    assert not any("stopped early" in n for n in result.notes)
