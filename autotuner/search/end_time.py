"""Time for the end of a study: what its end checks will take, from the study's own trials.

With a time budget (`--minutes`), the end checks (the winner's headroom check, its numerics
check: two parity trials, a multi-GPU study's one-GPU reference) must run inside it, after the
search. Each re-runs a config the study measured, so each is expected to take what that
config's trial took, process start and build included, at least FLOOR_S, with two corrections
the H200 showed:
- a re-run compiles warm: the study's compile cache (workers/compile_cache.py) holds the graphs
  its first trial compiled. Its compile is the cold one x the warm share the study measured
  (the largest of its re-runs' warm/cold compile ratios), WARM_COMPILE_SHARE until it has one:
  0.34 (Llama 3B fp8, 157 -> 53 s) and 0.42 (GPT-2 124M, 21 -> 8.8 s) on the H200. A config
  that recomputes activations (checkpointing) is learned apart, from RECOMPUTE_WARM_SHARE: on
  the H200 no checkpointed graph ever hit the cache (below);
- the headroom check adds an evaluation pass, which recompiles a forward-only graph, and a
  checkpoint save: the longest such pair the study measured, else EVAL_COMPILE_SHARE x the cold
  compile plus the checkpoint's bytes (fp32 weights and the optimizer's state) at
  CHECKPOINT_BYTES_PER_S.
  On the H200 the six Llama 1B/3B checks took 0.33-0.55 of the cold compile for the pass and
  saved at 1.3-1.8 GB/s (bench/results/h200_session_20261204g): the save is priced apart because
  a large model's checkpoint is a large share of the check.
A parity trial trains PARITY_STEPS steps of one micro-batch each (study/endgame.py) in place of
the warm-up and the timed repeats, so its estimate swaps those phases for PARITY_STEPS x the
config's step time / its grad_accum.

The search stops launching once the time left is under the checks' sum (x MARGIN, for the
dispatch and the result between them) plus one search trial (a trial launched now delays the
checks by its length: they start once every search trial has reported). Re-measurements,
which run before the checks, are cut short when the next one would leave the checks less than
that. Whichever comes first, the search also stops at SEARCH_TIME_SHARE of the budget, as it
did before, so the re-measurements have time too.

Why the measured walls and not only a share of the budget: in an 8-minute Llama 3B study on
the H200, trials took 80-190 s (compile 55-167 s); the last 15% (72 s) could hold none of them,
and the fp8 winner's numerics check never ran (bench/results/tune_llama_h200/). Why not the
cold walls alone: in a 10-minute one the checks were expected to take 12.1 min, and the
headroom check took 206 s (53 s of warm compile, 141 s writing its checkpoint to disk: the
check now counts a save's bytes without a disk) against the 171 s expected
(bench/results/h200_session_20261201/).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from statistics import median

from autotuner.purpose import SEARCH_TRIALS, Purpose
from autotuner.search.numerics import PARITY_STEPS
from autotuner.spec import Optimizer, TrialResult, canonical_params
from autotuner.types import Params

# In the end-time plan only (this module), never a row's purpose: a headroom check that
# also runs the numerics check's candidate steps (a `headroom` row whose config has
# measure.parity_steps), one process and one compile for both (search/numerics.py).
HEADROOM_AND_PARITY = "headroom+parity"
# The least a trial costs: the fastest measured, a GPT-2 124M trial forked from the
# pre-imported worker on the H200 (README, "Cheaper trials"), is 2 s.
FLOOR_S = 2.0
WARM_COMPILE_SHARE = 0.45  # a re-run's compile / its config's cold compile, until measured
# The same for a config that checkpoints activations: expected cold until the study measures a
# checkpointed re-run, and learned from it then (the CPU's hit the cache). A recompute that
# preserves the RNG state makes a graph inductor's cache bypasses on CUDA (torch 2.11): built-in
# blocks without dropout do not preserve it (workers/models/checkpointing.py), a user's factory
# blocks may, and a re-run expected warm that compiles cold spends the time kept for the end
# checks (on the H200: bench/results/h200_session_20261206c).
RECOMPUTE_WARM_SHARE = 1.0
EVAL_COMPILE_SHARE = 0.45  # the headroom check's evaluation pass / the cold compile (median)
WEIGHT_BYTES_PER_PARAM = 4  # the save's fp32 weights, beside the optimizer's state
CHECKPOINT_BYTES_PER_S = 1.5e9  # the headroom check's save on the H200 machine (median)
MARGIN = 1.2  # the checks' sum, plus dispatch, polling and storing between them
SEARCH_TIME_SHARE = 0.85  # with no end check due, the search stops here and re-measuring begins
# The end checks start only if expected to end within this share of the budget past it: an
# estimate a little long must not cost the winner its checks, and a study whose first trial
# took 4.3 of its 10 minutes must not run 8.7 more of checks (a replayed Llama 3B study did,
# to 13.0 min: bench/results/replay_minutes_h200).
END_GRACE_SHARE = 0.1
_MEASURED = SEARCH_TRIALS | {Purpose.REMEASURE}  # full trials of a candidate config
_RERUNS = (Purpose.REMEASURE, Purpose.HEADROOM)  # the same config again: its compile is warm
# What the headroom check adds to a re-run (workers/phases.py): its evaluation pass and its
# checkpoint save; `checks` too, where results stored both under that one phase.
_HEADROOM_PHASES = ("checks", "eval", "checkpoint")
# Phases a parity trial does not run.
_REPLACED_BY_PARITY = ("warmup", "measure", *_HEADROOM_PHASES)


@dataclass(frozen=True)
class TimeLeft:
    """Where a study stands against its time budget."""

    elapsed_s: float
    budget_s: float

    @property
    def remaining_s(self) -> float:
        return max(0.0, self.budget_s - self.elapsed_s)

    @property
    def share(self) -> float:
        return self.elapsed_s / self.budget_s if self.budget_s > 0 else 1.0

    def at(self) -> str:
        return f"{duration(self.elapsed_s)} of {duration(self.budget_s)}"


def duration(seconds: float) -> str:
    """`45 s` or `3.2 min`: the unit a reader of that length thinks in."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


@dataclass(frozen=True)
class DueCheck:
    """An end check still to run, and how long it is expected to take."""

    purpose: str
    params: Params
    expected_s: float


_NAMES = {
    Purpose.REFERENCE: "the one-GPU reference",
    Purpose.HEADROOM: "the headroom check",
    HEADROOM_AND_PARITY: "the headroom and numerics check",
    Purpose.PARITY_REFERENCE: "the numerics check's reference",
    Purpose.PARITY: "the numerics check",
}


def describe(checks: list[DueCheck]) -> str:
    """`the headroom check 3.2 min, the numerics check's reference 4.1 min, ...`."""
    return ", ".join(f"{_NAMES.get(c.purpose, c.purpose)} {duration(c.expected_s)}" for c in checks)


class TrialWalls:
    """What each measured config's trial took, and the study's typical search trial."""

    def __init__(self, recomputes: Callable[[Params], bool] | None = None) -> None:
        """`recomputes`: whether a config checkpoints activations (its compile-cache class:
        RECOMPUTE_WARM_SHARE); without it, every config is in one class."""
        self._recomputes = recomputes
        self._longest: dict[str, TrialResult] = {}  # canonical params -> its longest trial
        self._grad_accum: dict[str, int] = {}
        self._search_walls: list[float] = []
        # A re-run's compile / the config's cold one, by cache class (recomputes or not).
        self._warm_shares: dict[bool, list[float]] = {False: [], True: []}
        self._eval_s: list[float] = []  # the headroom checks' evaluation pass and save

    def observe(
        self, params: Params, result: TrialResult, purpose: str, grad_accum: int = 1
    ) -> None:
        key = canonical_params(params)
        known = self._longest.get(key)
        if purpose in _RERUNS and known is not None:
            self._learn_rerun(params, known, result, purpose)
        if purpose not in _MEASURED or not result.wall_s:
            return
        if purpose != Purpose.REMEASURE:
            self._search_walls.append(result.wall_s)
        self._grad_accum[key] = max(1, grad_accum)
        # The longest: the cold compile, not a re-run's warm one (an estimate may be long,
        # never short: a short one is a check that does not run).
        if known is None or result.wall_s > (known.wall_s or 0.0):
            self._longest[key] = result

    def _learn_rerun(
        self, params: Params, first: TrialResult, rerun: TrialResult, purpose: str
    ) -> None:
        if first.compile_s and rerun.compile_s is not None:
            share = min(1.0, rerun.compile_s / first.compile_s)
            self._warm_shares[self._cache_class(params)].append(share)
        if purpose == Purpose.HEADROOM:
            phases = rerun.phases_s or {}
            if any(p in phases for p in _HEADROOM_PHASES):
                self._eval_s.append(sum(phases.get(p, 0.0) for p in _HEADROOM_PHASES))

    def known(self, params: Params) -> bool:
        """Whether a trial of this config was observed."""
        return canonical_params(params) in self._longest

    def warm_share(self, params: Params) -> float:
        """A re-run's compile over its config's cold one: the largest the study measured for
        configs of its cache class, else the class's prior."""
        recomputes = self._cache_class(params)
        shares = self._warm_shares[recomputes]
        if shares:
            return max(shares)
        return RECOMPUTE_WARM_SHARE if recomputes else WARM_COMPILE_SHARE

    def _cache_class(self, params: Params) -> bool:
        return self._recomputes is not None and self._recomputes(params)

    def search_trial_s(self) -> float:
        """A search trial launched now: the median wall of the study's search trials."""
        return max(FLOOR_S, median(self._search_walls)) if self._search_walls else FLOOR_S

    def rerun_s(self, params: Params) -> float:
        """A re-run of a measured config (re-measurement, reference): its longest wall with
        the compile warm."""
        known = self._longest.get(canonical_params(params))
        if known is None:
            return self.search_trial_s()
        return max(FLOOR_S, (known.wall_s or 0.0) - self._compile_saved(params, known))

    def headroom_s(self, params: Params) -> float:
        """The headroom check: a re-run, then an evaluation pass and a checkpoint save."""
        known = self._longest.get(canonical_params(params))
        if self._eval_s:
            extra = max(self._eval_s)
        elif known is None:
            extra = 0.0
        else:
            optimizer = Optimizer(params.get("optimizer", Optimizer.ADAMW_FUSED))
            per_param = WEIGHT_BYTES_PER_PARAM + optimizer.state_bytes_per_param
            saved = per_param * (known.param_count or 0) / CHECKPOINT_BYTES_PER_S
            extra = EVAL_COMPILE_SHARE * (known.compile_s or 0.0) + saved
        return self.rerun_s(params) + extra

    def parity_s(self, params: Params) -> float:
        """A parity trial of the config (or of its knobs at the reference precision): its
        start, build and (warm) compile as measured, then PARITY_STEPS steps of one
        micro-batch each."""
        key = canonical_params(params)
        known = self._longest.get(key)
        if known is None or not known.wall_s:
            return self.search_trial_s()
        phases = known.phases_s or {}
        skipped = sum(phases.get(p, 0.0) for p in _REPLACED_BY_PARITY)
        steps = PARITY_STEPS * (known.step_time_s or 0.0) / self._grad_accum.get(key, 1)
        return max(FLOOR_S, known.wall_s - self._compile_saved(params, known) - skipped + steps)

    def headroom_and_parity_s(self, params: Params) -> float:
        """A headroom check that runs the numerics check's candidate steps first: the check,
        plus PARITY_STEPS steps of one micro-batch (its compile is the check's, counted once)."""
        key = canonical_params(params)
        known = self._longest.get(key)
        steps = (
            PARITY_STEPS * (known.step_time_s or 0.0) / self._grad_accum.get(key, 1)
            if known is not None
            else 0.0
        )
        return self.headroom_s(params) + steps

    def _compile_saved(self, params: Params, known: TrialResult) -> float:
        return (known.compile_s or 0.0) * (1.0 - self.warm_share(params))

    def due(self, checks: list[tuple[str, Params]]) -> list[DueCheck]:
        """Each (purpose, params) with its expected seconds."""
        return [
            DueCheck(purpose, params, self.expected_s(purpose, params))
            for purpose, params in checks
        ]

    def expected_s(self, purpose: str, params: Params) -> float:
        """How long the end check `purpose` of a config with these params is expected to take."""
        if purpose in (Purpose.PARITY, Purpose.PARITY_REFERENCE):
            return self.parity_s(params)
        if purpose == Purpose.HEADROOM:
            return self.headroom_s(params)
        if purpose == HEADROOM_AND_PARITY:
            return self.headroom_and_parity_s(params)
        return self.rerun_s(params)


def needed_s(checks: list[DueCheck]) -> float:
    """The time to keep for these checks."""
    return MARGIN * sum(c.expected_s for c in checks)


# The words of a stop for the end checks: the search's and a re-measurement's read alike.
FOR_THE_END_CHECKS = "to leave time for the end checks"


def checks_stop(time: TimeLeft, checks: list[DueCheck], walls: TrialWalls) -> str | None:
    """Why the search must stop now to leave the end checks their time, or None."""
    if not checks:
        return None
    trial_s = walls.search_trial_s()
    keep_s = needed_s(checks)
    if time.remaining_s >= keep_s + trial_s:
        return None
    return (
        f"search stopped at {time.at()} {FOR_THE_END_CHECKS} "
        f"({describe(checks)}; {duration(keep_s)} with a {MARGIN:.1f}x margin, from "
        f"the measured walls of the configs they re-run, compile included), as a "
        f"search trial takes {duration(trial_s)}"
    )


def share_stop(time: TimeLeft, *, reserves_share: bool) -> str | None:
    """Why the search must stop now to leave the re-measurements their share, or None."""
    if reserves_share and time.share >= SEARCH_TIME_SHARE:
        return (
            f"search stopped at {time.at()} ({SEARCH_TIME_SHARE:.0%} of the time budget): the "
            "rest is for re-measuring the top candidates and the end checks"
        )
    return None


def checks_cut(time: TimeLeft, checks: list[DueCheck]) -> str | None:
    """Why the end checks must not start (they would end past the budget and its grace), or
    None to run them. Decided once, before the first: they are a unit (the numerics check's
    reference is worth nothing without the candidate's parity steps after it)."""
    if not checks:
        return None
    need_s = sum(c.expected_s for c in checks)
    over_s = need_s - time.remaining_s
    if over_s <= END_GRACE_SHARE * time.budget_s:
        return None
    return (
        f"end checks not started at {time.at()}: they would end {duration(over_s)} past the "
        f"time budget ({describe(checks)})"
    )


def remeasure_cut(
    time: TimeLeft,
    rerun: DueCheck,
    checks: list[DueCheck],
    done: int,
    planned: int,
    *,
    checks_said: bool = False,
) -> str | None:
    """Why the next re-measurement must not run (it, and the end checks after it, would not
    fit in the time left), or None to run it. `checks_said`: the search's stop already
    described the end checks (the recommendation's `stopped` reads both, one after the other)."""
    keep_s = needed_s(checks)
    if time.remaining_s >= rerun.expected_s + keep_s:
        return None
    stopped = f"re-measurement stopped after {done} of {planned} at {time.at()}"
    if not checks:
        return (
            f"{stopped}: the next takes {duration(rerun.expected_s)}, with "
            f"{duration(time.remaining_s)} left"
        )
    if checks_said:
        return (
            f"{stopped} for the same end checks: the next takes {duration(rerun.expected_s)}, "
            f"with {duration(time.remaining_s)} left"
        )
    return (
        f"{stopped} {FOR_THE_END_CHECKS} ({describe(checks)}; {duration(keep_s)} with a "
        f"{MARGIN:.1f}x margin); the next re-measurement takes {duration(rerun.expected_s)}"
    )
