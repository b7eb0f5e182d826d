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
