"""Cost model: what one trial will cost in memory, and give in tokens/s, before it is launched.

Read in this order:

- `memory`: the physical estimate, a sum of components (weights and optimizer state,
  activations, attention scores, the loss path, constants), before any measurement;
- `calibration`: one multiplier per component fitted to the peaks (and OOMs) the study has
  measured, and a prediction with a standard deviation;
- `model`: `CostModel`, the study's memory model the search asks before each launch;
- `accuracy`: how good its at-launch predictions were, for the study's evidence;
- `throughput`: the tokens/s of a config before it runs (physics per term, efficiencies fitted
  to the study's trials), which the proposer (`search/proposer.py`) uses to choose what to run;
- `regression`: the Bayesian, relative-error, robust fit both models share.
"""

from autotuner.search.costmodel.accuracy import (
    error_summary,
    sequential_errors,
    throughput_errors,
)
from autotuner.search.costmodel.calibration import Calibration, Prediction
from autotuner.search.costmodel.memory import MemoryEstimate, cost_summary, estimate
from autotuner.search.costmodel.model import CostModel, oom_need_gib

__all__ = [
    "Calibration",
    "CostModel",
    "MemoryEstimate",
    "Prediction",
    "cost_summary",
    "error_summary",
    "estimate",
    "oom_need_gib",
    "sequential_errors",
    "throughput_errors",
]
