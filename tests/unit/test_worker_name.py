"""A trial's `worker` names the GPU its Ray task was given (Ray sets CUDA_VISIBLE_DEVICES for
each task, the trial's process inherits it): on a node running one trial per GPU, the trial
list tells which ran where."""

from __future__ import annotations

import os
import socket

import pytest

from autotuner.executors.ray_executor import worker_name


def test_a_trial_on_a_gpu_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert worker_name() == f"{socket.gethostname()}:{os.getpid()} gpu=1"


@pytest.mark.parametrize("visible", [None, ""])  # no GPU asked: unset, or empty as Ray sets it
def test_a_trial_without_a_gpu_names_none(
    monkeypatch: pytest.MonkeyPatch, visible: str | None
) -> None:
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert worker_name() == f"{socket.gethostname()}:{os.getpid()}"
