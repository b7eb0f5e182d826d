"""Helpers for the data-plane tests: tiny models on the real CPU torch, short measurements."""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

import pytest
from torch.utils._python_dispatch import TorchDispatchMode

from autotuner.spec import Knobs, MeasureSettings, ModelSpec, TrialConfig

# Short but complete: the same protocol as on a GPU, scaled down to keep the folder fast.
FAST = MeasureSettings(
    repeats=2,
    min_repeat_s=0.05,
    warmup_min_steps=1,
    warmup_max_steps=3,
    timeout_s=120,
    device="cpu",
)


def fast(**overrides) -> MeasureSettings:
    """FAST with some settings changed, validated (e.g. `fast(data_source="loader")`)."""
    return MeasureSettings.model_validate({**FAST.model_dump(exclude_unset=True), **overrides})


# Knobs' defaults target a GPU (bf16 + efficient attention); these run on any CPU.
CPU_KNOBS = {"precision": "fp32", "attention": "math"}


def make_config(preset: str = "tiny", model: dict | None = None, **knobs) -> TrialConfig:
    fault = knobs.pop("fault", "none")
    measure = knobs.pop("measure", FAST)
    return TrialConfig(
        model=ModelSpec.resolve({"preset": preset, **(model or {})}),
        knobs=Knobs(**{**CPU_KNOBS, **knobs}),
        measure=measure,
        fault=fault,
    )


class OpCounter(TorchDispatchMode):
    """Counts the aten ops that really run (below autograd), by short name."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture
def config_factory():
    return make_config


def wait_for(condition, timeout_s: float, what: str):
    """condition()'s first true value, polled until timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def start_preload_server() -> Path:
    """This checkout's pre-imported worker (workers/preload.py) for the tests' environment,
    started if none runs yet; its socket once it answers."""
    from workers import preload_client
    from workers.process import trial_env

    env = trial_env(make_config())
    path = preload_client.start_server(sys.executable, env)  # owned by this pytest process
    # torch's import on a loaded 2-core machine: up to half a minute.
    return wait_for(lambda: path if path.exists() else None, 180, "the server's socket")


@pytest.fixture
def owner(monkeypatch: pytest.MonkeyPatch):
    """A process standing in for a Ray node: this test's trials' server belongs to it (a server
    of its own, started by the test's first trial, gone when the owner is killed)."""
    import subprocess

    from workers import preload_client

    proc = subprocess.Popen(["sleep", "600"])
    monkeypatch.setenv(preload_client.OWNER_ENV, str(proc.pid))
    yield proc
    proc.kill()
    proc.wait()
