"""The measurement noise band: how far apart two measured throughputs must be to differ.

One rule for the whole study: the larger of the spread of the repeats inside a trial's process
(`within`) and the spread of one config's medians across fresh processes (`between`), never
under MIN_NOISE_REL. The search's live convergence test (search/progress.py) passes only
`within`: it runs before any config was re-measured, so no fresh-process spread exists yet.
The recommendation (study/recommend.py) passes both once re-measurements have run.
"""

from __future__ import annotations

MIN_NOISE_REL = 0.005  # timing on a quiet machine is never better than this


def noise_band(within_rel: float, between_rel: float = 0.0) -> float:
    """The relative noise band from the two spreads the caller has measured."""
    return max(within_rel, between_rel, MIN_NOISE_REL)
