"""What a study maximises, computed from a measured result, and the constraints it honours.

Every objective is expressed so that larger is better (Optuna direction "maximize"), which keeps
infeasible trials simple: they are told as 0.0 with a violated constraint.

- tokens_per_s: whole-trial throughput (the default).
- tokens_per_s_per_gpu: throughput per GPU, for trials that differ in GPU count.
- mtokens_per_usd: million tokens per dollar; needs options.usd_per_gpu_hour.
- time_to_train: the planned run's effective tokens/s with compile time charged,
  planned_tokens / (compile_s + planned_tokens / tokens_per_s); needs options.planned_tokens
  (or options.planned_hours: the share of those hours left after compiling, times tokens/s).

`time_to_train` is reported as a rate so that larger stays better; the recommendation also gives
the run's hours. A memory ceiling (`options.max_mem_gib`) is a constraint, not an objective: a
trial whose measured peak is above it is told to the sampler as infeasible by how far it is over
and is never recommended; so is one that leaves less than the headroom free
(`options.headroom`, search/headroom.py).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from autotuner.search import headroom

if TYPE_CHECKING:
    from autotuner.options import StudyOptions
    from autotuner.spec import TrialResult


class Objective(StrEnum):
    TOKENS_PER_S = "tokens_per_s"  # whole-trial throughput (default)
    TOKENS_PER_S_PER_GPU = "tokens_per_s_per_gpu"  # efficiency when trials differ in GPU count
    MTOKENS_PER_USD = (
        "mtokens_per_usd"  # million tokens per dollar (needs options.usd_per_gpu_hour)
    )
    TIME_TO_TRAIN = "time_to_train"  # planned run's effective tokens/s, compile time charged

    def describe(self) -> str:
        return {
            Objective.TOKENS_PER_S: "tokens/s",
            Objective.TOKENS_PER_S_PER_GPU: "tokens/s per GPU",
            Objective.MTOKENS_PER_USD: "million tokens per $",
            Objective.TIME_TO_TRAIN: "effective tokens/s over the planned run (compile charged)",
        }[self]


def check_options(objective: Objective, options: StudyOptions) -> None:
    """Raise ValueError with the fix when an objective lacks the options it needs.

    The message names options as `options.x`; the CLI shows them as its `--x` flags."""
    if objective == Objective.MTOKENS_PER_USD and not options.usd_per_gpu_hour:
        raise ValueError("objective mtokens_per_usd needs options.usd_per_gpu_hour (a price > 0)")
    if objective == Objective.TIME_TO_TRAIN and not (
        options.planned_tokens or options.planned_hours
    ):
        raise ValueError(
            "objective time_to_train needs the run's length: options.planned_tokens (e.g. 2e9) "
            "or options.planned_hours (e.g. 24)"
        )


def objective_value(
    objective: Objective, result: TrialResult, num_gpus: int, options: StudyOptions
) -> float:
    """The number the search maximises for one ok result."""
    assert result.tokens_per_s is not None
    if objective == Objective.TOKENS_PER_S:
        return result.tokens_per_s
    if objective == Objective.TOKENS_PER_S_PER_GPU:
        return result.tokens_per_s_per_gpu or result.tokens_per_s / max(num_gpus, 1)
    check_options(objective, options)
    if objective == Objective.TIME_TO_TRAIN:
        return result.tokens_per_s * train_efficiency(result, options)
    assert options.usd_per_gpu_hour is not None  # check_options
    usd_per_s = options.usd_per_gpu_hour * max(num_gpus, 1) / 3600.0
    return result.tokens_per_s / 1e6 / usd_per_s


def train_efficiency(result: TrialResult, options: StudyOptions) -> float:
    """Fraction of the planned run spent training rather than compiling (0..1].

    Only compile time is charged: warm-up steps train the model like any other step, and the
    build (model, optimizer, data) costs the same for every config.
    """
    assert result.tokens_per_s
    compile_s = result.compile_s or 0.0
    if options.planned_tokens:
        train_s = options.planned_tokens / result.tokens_per_s
        return train_s / (train_s + compile_s)
    run_s = (options.planned_hours or 0.0) * 3600.0
    return max(run_s - compile_s, 0.0) / run_s or 1e-9


def time_to_train_h(result: TrialResult, options: StudyOptions) -> float | None:
    """Hours the planned run takes with this config (compile included), when planned_tokens."""
    if not result.tokens_per_s or not options.planned_tokens:
        return None
    return (options.planned_tokens / result.tokens_per_s + (result.compile_s or 0)) / 3600


def memory_violation(result: TrialResult, options: StudyOptions) -> float:
    """How far a measured peak is over what the options allow: over options.max_mem_gib (peak
    / ceiling - 1), or over the GPU memory less the headroom (search/headroom.py), whichever is
    further; 0 if within both."""
    over_headroom = headroom.violation(result, options)
    ceiling = options.max_mem_gib
    if ceiling is None or result.peak_mem_gib is None:
        return over_headroom
    return max(result.peak_mem_gib / ceiling - 1.0, over_headroom, 0.0)
