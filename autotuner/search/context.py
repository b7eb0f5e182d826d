"""What one study's search judges its proposals against: the space, the model, the hardware, the
GPUs per trial, the options and the study's cost model. The policy builds it once; the screen
and the seeder, which read all of it, take it whole instead of six arguments each."""

from __future__ import annotations

from dataclasses import dataclass

from autotuner.executors.base import Target
from autotuner.options import StudyOptions
from autotuner.search.costmodel import CostModel
from autotuner.search.space import SearchSpace
from autotuner.spec import ModelSpec


@dataclass(frozen=True)
class SearchContext:
    space: SearchSpace
    model: ModelSpec
    target: Target
    gpus: int  # per trial
    options: StudyOptions
    cost: CostModel  # the study's, calibrated by the policy as trials finish
