"""Progress of the search: the best value so far, the noise, and whether it still improves.

Each finished search or seed trial updates the best objective value, the number of trials in a
row that did not beat it beyond the measurement noise (the median repeat spread of the measured
trials, at least 0.5%), and each feasible config's best value (the candidates to re-measure).
Re-measurements are only counted: they move the re-measure plan on (remeasure.py), never the
best. The search has converged once `patience` trials in a row brought nothing beyond noise.
"""

from __future__ import annotations

from typing import Any

from autotuner.options import StudyOptions
from autotuner.search.objective import Objective, memory_violation, objective_value
from autotuner.spec import TrialResult, TrialStatus, canonical_params

# A multi-GPU study's last trial: its best config on one GPU, for the scaling efficiency.
REFERENCE = "reference"
# The numerics check of the winner (search/numerics.py): a loss-parity trial of the candidate,
# and of the same knobs at the reference precision.
PARITY = "parity"
PARITY_REFERENCE = "parity-ref"
# The headroom check of the winner (search/headroom_check.py): the config once more, with an
# evaluation pass and a checkpoint save after the timed repeats, for its real peak.
HEADROOM_CHECK = "headroom"
# In the end-time plan only (search/end_time.py), never a row's purpose: a headroom check that
# also runs the numerics check's candidate steps (a `headroom` row whose config has
# measure.parity_steps), one process and one compile for both (search/numerics.py).
HEADROOM_AND_PARITY = "headroom+parity"
# A proxy trial (options.proxy_layers): a candidate's knobs on a shallower model of the same
# width, run to teach the throughput and memory models about a kind of config (its precision,
# compile mode, attention, checkpointing) before a full-depth trial is spent on it.
PROXY = "proxy"
# The trials that are not measurements of a candidate config (the winner's end checks, and
# proxies): never told to the sampler, never candidates, no lessons for the cost model (their
# configs or their protocol differ), except a proxy's, which the policy learns from with its
# own model (policy.observe).
END_CHECKS = frozenset({REFERENCE, PARITY, PARITY_REFERENCE, HEADROOM_CHECK, PROXY})
# The expert default's trials (search/seeding.py): the seed the recommendation is compared with
# (study/recommend.py `vs_expert_default`), marked so because it need not run first (a clearly
# faster seed may run before it) and its first trial may fail, be retried or be pruned for its
# twin: no trial number says which trial it is.
EXPERT_DEFAULT = "expert-default"
# A study's search trials: its seeds and its proposals (neither re-runs nor end checks).
SEARCH_TRIALS = frozenset({EXPERT_DEFAULT, "seed", "search"})


class Progress:
    """How far the search has come, one finished trial at a time."""

    def __init__(self, *, objective: Objective, gpus: int, options: StudyOptions) -> None:
        self.objective, self.gpus, self.options = objective, gpus, options
        self.patience = options.early_stop_patience
        self.best: float | None = None
        self.since_improvement = 0
        self.search_trials = 0
        self.spreads: list[float] = []
        # canonical params -> (params, best search value) of each feasible config
        self.values: dict[str, tuple[dict[str, Any], float]] = {}
        self.remeasured = 0
        self.referenced = False  # the 1-GPU scaling reference has run (multi-GPU studies)

    def observe(self, params: dict[str, Any], result: TrialResult, purpose: str) -> None:
        """Count a finished (measured, not predicted) trial of this purpose."""
        if purpose == "remeasure":
            self.remeasured += 1
            return
        if purpose == REFERENCE:
            self.referenced = True  # a 1-GPU run: not comparable with this study's trials
            return
        if purpose in END_CHECKS:
            return  # a parity trial: a loss curve, no throughput measurement
        fclass = result.failure_class
        if fclass is not None and not fclass.is_config_failure:
            return  # infra: says nothing about the config, and it is retried
        self.search_trials += 1
        value = self.value(result)
        if value is None:
            self.since_improvement += 1
            return
        if result.stopped_early:
            # Below the floor, far under the best: no candidate to re-measure, and its one
            # repeat has no spread to tell the noise by.
            self.since_improvement += 1
            return
        key = canonical_params(params)
        self.values[key] = (params, max(value, self.values.get(key, (params, 0.0))[1]))
        if result.spread_rel is not None:
            self.spreads.append(result.spread_rel)
        if self.best is None or value > self.best * (1.0 + self.noise_rel()):
            self.since_improvement = 0
        else:
            self.since_improvement += 1
        self.best = max(self.best or 0.0, value)

    def value(self, result: TrialResult) -> float | None:
        """The objective value of a feasible measured trial, else None."""
        if result.status != TrialStatus.OK or memory_violation(result, self.options) > 0:
            return None
        try:
            return objective_value(self.objective, result, self.gpus, self.options)
        except ValueError:
            return None

    def noise_rel(self) -> float:
        """The measurement noise: the median repeat spread so far, at least 0.5%."""
        spreads = sorted(self.spreads)
        return max(spreads[len(spreads) // 2] if spreads else 0.0, 0.005)

    def converged(self) -> bool:
        """No search trial improved the best beyond noise in the last `patience` trials."""
        if self.patience <= 0 or self.best is None:
            return False
        # A few trials beyond the patience, so the sampler's random start-up phase is over.
        started = self.search_trials >= self.patience + 4
        return started and self.since_improvement >= self.patience
