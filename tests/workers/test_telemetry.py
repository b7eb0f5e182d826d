"""Telemetry, fingerprint and GPU probe degrade to None/{} without a GPU, never crash."""

from __future__ import annotations

import torch

from workers.fingerprint import collect
from workers.probe import probe_gpus
from workers.telemetry import Sampler


def test_sampler_without_gpu_yields_none():
    if torch.cuda.is_available():
        return
    with Sampler(10.0) as sampler:
        pass
    assert sampler.result is None


def test_sampler_disabled_at_zero_hz():
    with Sampler(0.0) as sampler:
        pass
    assert sampler.result is None


def test_cpu_fingerprint():
    fp = collect(torch.device("cpu"))
    assert fp.device_type == "cpu" and fp.torch == torch.__version__
    assert fp.python and fp.hostname and fp.device_count == 1
    assert len(fp.key) == 12


def test_probe_without_gpu_is_empty():
    if not torch.cuda.is_available():
        assert probe_gpus() == {}


def test_the_samples_become_an_aligned_series_in_the_summarys_units():
    from workers.telemetry import MAX_SERIES_POINTS, _series

    assert _series([]) is None
    ticks = [
        (0.1 * i, {"sm": 90.0, "mem": 40.0, "power": 600_000.0, "clock": 1980.0,
                   "temp": None if i % 2 else 60.0, "used": 2.0 * 1024**3})
        for i in range(10)
    ]  # fmt: skip
    series = _series(ticks)
    assert series is not None and len(series.t_s) == 10
    assert series.power_w[0] == 600.0 and series.mem_used_gib[0] == 2.0
    assert series.temperature_c[1] is None and series.temperature_c[0] == 60.0
    long = [(0.01 * i, {"sm": 1.0, "mem": None, "power": None, "clock": None, "temp": None,
                        "used": None}) for i in range(5000)]  # fmt: skip
    thinned = _series(long)
    assert thinned is not None and len(thinned.t_s) <= MAX_SERIES_POINTS
    assert thinned.mem_util_pct == []  # never read: an empty list, not a column of None
