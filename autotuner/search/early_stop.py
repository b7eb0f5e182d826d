"""The floor below which a search trial stops after its first timed repeat.

A trial whose first repeat runs far below the incumbent cannot become the recommendation: the
rest of its repeats would only measure precisely how much slower it is. The coordinator gives
each search trial a floor (`MeasureSettings.abandon_below_tokens_per_s`), and the worker stops
after a repeat below it (workers/measure.py), reporting the repeats it ran with
`stopped_early` set: told to the sampler and the cost models as what it is (a real, slow
measurement), never a recommendation or a re-measurement candidate (study/recommend.py).

    floor = incumbent tokens/s x (1 - max(MIN_MARGIN, NOISE_MULTIPLE x the study's noise))

The margin is far outside the noise (at least 25%, or five times the median repeat spread), so
a config that might win is never stopped by a noisy repeat. Only search trials get a floor:
seeds (the expert default and its kin are the comparison), re-measurements and end checks
always run in full. Only for objectives that grow with tokens/s: `time_to_train` charges
compile time, and a slower config that compiles faster can win it.
"""

from __future__ import annotations

from autotuner.search.objective import Objective

MIN_MARGIN = 0.25
NOISE_MULTIPLE = 5.0
# Objectives that only grow with tokens/s at a fixed GPU count (the study's own).
_MONOTONE = frozenset(
    {Objective.TOKENS_PER_S, Objective.TOKENS_PER_S_PER_GPU, Objective.MTOKENS_PER_USD}
)


def abandon_floor(
    objective: Objective, incumbent_tokens_per_s: float | None, noise_rel: float
) -> float | None:
    """The tokens/s a search trial's first repeat must reach to run in full; None: no floor."""
    if objective not in _MONOTONE or not incumbent_tokens_per_s:
        return None
    margin = max(MIN_MARGIN, NOISE_MULTIPLE * noise_rel)
    if margin >= 1.0:
        return None  # the noise is so large that nothing can be ruled out
    return incumbent_tokens_per_s * (1.0 - margin)
