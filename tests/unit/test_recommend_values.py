"""The recommendation's numbers come from the same measurements: a config measured twice (its
trial and a fresh-process re-measurement) reports the median of both for tokens/s and tokens/s
per GPU alike (a 1-GPU H200 study printed 381,892 tokens/s beside 382,265 per GPU, the
first trial's)."""

from __future__ import annotations

from autotuner.search.objective import Objective
from autotuner.spec import Knobs, ModelSpec, TrialConfig
from autotuner.storage.models import Trial, TrialState
from autotuner.study.recommend import recommend
from tests.fakes import measured


def _row(number: int, purpose: str, tps: float) -> Trial:
    config = TrialConfig(model=ModelSpec.resolve({"preset": "tiny"}), knobs=Knobs())
    return Trial(
        number=number,
        state=TrialState.COMPLETE.value,
        purpose=purpose,
        objective_value=tps,
        params={"micro_batch_size": 8},
        config=config.model_dump(mode="json"),
        result=measured(tps).model_dump(mode="json"),
    )


def test_tokens_per_s_and_per_gpu_are_the_median_of_the_same_measurements() -> None:
    rec = recommend([_row(0, "seed", 100.0), _row(1, "remeasure", 110.0)], Objective.TOKENS_PER_S)
    assert rec is not None
    assert rec["tokens_per_s"] == 105.0
    assert rec["tokens_per_s_per_gpu"] == 105.0
