"""The knob report's PED-ANOVA study shares one distribution object per knob (a speed-up that
must not change a number of the report)."""

from __future__ import annotations

import random

import pytest
from optuna.distributions import CategoricalDistribution

from autotuner.search import importance


def _configs(n: int) -> list[tuple[dict[str, object], float]]:
    rng = random.Random(7)
    out = []
    for _ in range(n):
        params = {
            "micro_batch_size": rng.choice([4, 8, 16, 32]),
            "precision": rng.choice(["bf16", "fp16", "fp32"]),
            "compile_mode": rng.choice(["none", "default"]),
        }
        speed = {"bf16": 2.0, "fp16": 1.9, "fp32": 1.0}[str(params["precision"])]
        out.append((params, 1000.0 * speed * (1.2 if params["compile_mode"] != "none" else 1.0)))
    return out


def test_trials_share_one_distribution_per_knob() -> None:
    dist = importance._SharedChoices(["a", "b"])
    study = importance._study([{"k": "a"}, {"k": "b"}, {"k": "a"}], {"k": dist})
    assert all(t.distributions["k"] is dist for t in study.get_trials(deepcopy=False))
    twin = importance._SharedChoices(["a", "b"])  # still compared by value
    assert dist == twin and hash(dist) == hash(twin) and dist != importance._SharedChoices(["a"])


@pytest.mark.parametrize("n", [40, 700])  # 700: past the sample bound
def test_the_report_is_the_one_plain_distributions_give(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    configs = _configs(n)
    shared = importance.knob_report(configs, 0.01)
    monkeypatch.setattr(importance, "_SharedChoices", CategoricalDistribution)
    plain = importance.knob_report(configs, 0.01)
    assert shared == plain
    assert any(row["importance_raw"] for row in shared)  # PED-ANOVA ran
