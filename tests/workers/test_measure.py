"""The timing protocol, on fake steps whose durations we control."""

from __future__ import annotations

import math
import time

import pytest
import torch

from autotuner.spec import MeasureSettings
from workers.errors import NumericsError
from workers.measure import steps_per_repeat, timed_repeats, warm_up


class FakeStep:
    """Sleeps for the given durations in turn (the last one repeats); returns a falling loss."""

    def __init__(self, durations, losses=None):
        self.durations, self.calls = list(durations), 0
        self.losses = losses

    def __call__(self):
        d = self.durations[min(self.calls, len(self.durations) - 1)]
        time.sleep(d)
        loss = self.losses(self.calls) if self.losses else 10.0 / (1 + self.calls)
        self.calls += 1
        return torch.tensor(loss)


class CountingSync:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1


def test_first_step_is_timed_alone_and_warmup_stops_when_stable():
    s = MeasureSettings(warmup_min_steps=3, warmup_max_steps=30, warmup_stable_rel=0.5)
    step = FakeStep([0.2, 0.05, 0.02])  # "compile", one slow step, then steady
    t = warm_up(step, CountingSync(), s)
    assert t.first_step_s >= 0.2
    assert t.warmup_stable and 3 <= len(t.warmup_step_s) < 30
    assert t.step_time_s == pytest.approx(0.02, abs=0.015)


def test_warmup_gives_up_at_max_steps_and_says_so():
    s = MeasureSettings(warmup_min_steps=1, warmup_max_steps=4, warmup_stable_rel=0.01)
    step = FakeStep([0.001, 0.001, 0.02, 0.001, 0.02, 0.001, 0.02])
    t = warm_up(step, CountingSync(), s)
    assert not t.warmup_stable and len(t.warmup_step_s) == 4


def test_steps_per_repeat_fills_min_repeat_s():
    s = MeasureSettings(min_repeat_s=1.0)
    assert steps_per_repeat(0.03, s) == 34
    assert steps_per_repeat(5.0, s) == 1
    assert steps_per_repeat(0.03, s.model_copy(update={"steps_per_repeat": 7})) == 7


def test_repeats_sync_only_at_their_edges():
    s = MeasureSettings(repeats=3, min_repeat_s=0.03, warmup_min_steps=1, warmup_max_steps=3)
    step, sync = FakeStep([0.01]), CountingSync()
    t = warm_up(step, sync, s)
    warm_syncs, warm_calls = sync.calls, step.calls
    timed_repeats(step, sync, t, s)
    assert sync.calls - warm_syncs == 2 * s.repeats  # one before and one after each repeat
    assert step.calls - warm_calls == s.repeats * t.steps_per_repeat
    # Each repeat is planned to fill min_repeat_s at the warm-up's step time, and really runs
    # that many steps (a 10 ms sleep never returns early). Not `r >= 0.03`: on a loaded machine
    # the warm-up's sleeps overshoot, so the plan has fewer steps than a quiet machine's.
    assert t.steps_per_repeat * t.step_time_s >= s.min_repeat_s - 1e-9
    assert len(t.repeat_s) == 3 and all(r >= t.steps_per_repeat * 0.01 for r in t.repeat_s)
    assert t.loss_last < t.loss_first


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_loss_is_numerics(bad):
    s = MeasureSettings(warmup_min_steps=1, warmup_max_steps=3)
    with pytest.raises(NumericsError, match="first step"):
        warm_up(FakeStep([0.001], losses=lambda i: bad), CountingSync(), s)
    late = FakeStep([0.001], losses=lambda i: bad if i >= 5 else 1.0)
    t = warm_up(late, CountingSync(), s.model_copy(update={"warmup_max_steps": 2}))
    with pytest.raises(NumericsError, match="repeat"):
        timed_repeats(late, CountingSync(), t, s.model_copy(update={"steps_per_repeat": 3}))
