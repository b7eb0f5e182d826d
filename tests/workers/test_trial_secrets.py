"""A trial's processes never get the service's secrets (docs/trust-model.md): an allowed
factory that records its environment, run for real through the launcher, finds none of them,
forked from the pre-imported worker or started fresh; nor does a rank's environment."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import workers.launch_ranks as launch_ranks
from autotuner.spec import Knobs, ModelSpec, TrialConfig, TrialStatus
from workers.launch import run_trial_process
from workers.service_secrets import SECRET_VARS

from .conftest import FAST

REPO = Path(__file__).resolve().parents[2]
SECRETS = {
    "AUTOTUNER_TOKEN": "tok-1f2e",
    "AUTOTUNER_DATABASE_URL": "postgresql://autotuner:hunter2@db/autotuner",
    "PGPASSWORD": "hunter2",
    "RAY_AUTH_TOKEN": "ray-7c1d",
}


def recording_factory(tmp_path: Path) -> tuple[str, Path]:
    """A factory that writes its process's environment, then builds the example model."""
    out = tmp_path / "environ.json"
    path = tmp_path / "env_model.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import inspect, json, os, runpy
            _build = runpy.run_path({str(REPO / "examples" / "my_model.py")!r})["build"]

            def build(**kwargs):
                with open({str(out)!r}, "w") as f:
                    json.dump(dict(os.environ), f)
                wanted = inspect.signature(_build).parameters
                return _build(**{{k: v for k, v in kwargs.items() if k in wanted}})
            """
        )
    )
    return f"{path}:build", out


@pytest.mark.parametrize("preload", ["1", "0"], ids=["forked", "fresh"])
def test_an_allowed_factory_sees_no_service_secret(
    preload: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)  # as the service's environment, and its Ray's, holds
    monkeypatch.setenv("AUTOTUNER_PRELOAD", preload)
    factory, out = recording_factory(tmp_path)
    spec = ModelSpec.resolve(
        {
            "factory": factory,
            "factory_args": {"mlp_ratio": 2},
            "n_layer": 1,
            "d_model": 32,
            "n_head": 2,
            "vocab_size": 256,
            "seq_len": 16,
        }
    )
    config = TrialConfig(model=spec, knobs=Knobs(precision="fp32", attention="math"), measure=FAST)
    result = run_trial_process(config)
    assert result.status == TrialStatus.OK, result.error_message
    environ = json.loads(out.read_text())
    assert "PYTHONPATH" in environ  # it did record the trial's environment
    leaked = {k: v for k, v in environ.items() if k in SECRET_VARS or v in SECRETS.values()}
    assert leaked == {}


def test_a_rank_gets_no_secret_even_through_the_config_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    config = TrialConfig(
        model=ModelSpec.resolve({"preset": "tiny"}),
        knobs=Knobs(precision="fp32", attention="math", parallel="ddp"),
        num_gpus=2,
        env={"AUTOTUNER_TOKEN": "from-the-config"},
    )
    env = launch_ranks.rank_env(config, launch_ranks.Rendezvous(2), 0, 29500, 60.0)
    assert not SECRET_VARS & set(env) and env["WORLD_SIZE"] == "2"
