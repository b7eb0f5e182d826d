"""What the search asks next, on its runner (coordinator.StudyRunner): a leader's next
micro-batch up where a measured peak leaves room for it, the queued seeds, then the throughput
model's proposal (search/proposer.py), with a proxy of its config
first where its kind was never measured; the sampler proposes when the model has none.

Configs reach Optuna through its waiting queue, one at a time just before its ask, so its
history records and learns from them as from its own proposals.
"""

from __future__ import annotations

from typing import Protocol

from optuna import Study, Trial
from optuna.trial import FrozenTrial
from optuna.trial import TrialState as OptunaState

from autotuner.purpose import END_CHECKS, Purpose
from autotuner.search.policy import SearchPolicy
from autotuner.search.sampler import Observation
from autotuner.search.space import SearchSpace
from autotuner.spec import Knobs, ModelSpec, canonical_params
from autotuner.study.trials import InFlight
from autotuner.types import Params


class Runner(Protocol):
    """What choosing the next config reads and changes on its runner."""

    space: SearchSpace
    gpus_per_trial: int
    policy: SearchPolicy
    optuna: Study
    measured: dict[str, Observation]
    attempted: set[str]
    _late: set[str]
    _queue: list[Params]
    _later_seeds: list[Params]

    @property
    def in_flight(self) -> dict[str, InFlight]: ...

    def _dispatch(
        self,
        ask: Trial | None,
        params: Params,
        knobs: Knobs,
        retry_of: int | None,
        purpose: str | None = None,
        model: ModelSpec | None = None,
    ) -> None: ...


def launch_proxy(runner: Runner) -> bool:
    """With options.proxy_layers: the throughput model's next config, when its kind was
    never measured, first on the shallower proxy model (policy.proxy_for). It is not told
    to the sampler and never a candidate; the next proposal is made knowing it."""
    policy = runner.policy
    if policy.proxy_model() is None or runner._queue or _waiting(runner.optuna):
        return False
    params = policy.suggest(taken(runner), running_params(runner))
    if params is None:
        return False
    proxy = policy.proxy_for(params)
    if proxy is None:
        # Its kind is known: it runs at full depth, asked for next (queued here, so the
        # guided proposal is not computed a second time).
        runner.optuna.enqueue_trial(params, skip_if_exists=False)
        return False
    knobs = runner.space.knobs_for(params, proxy, runner.gpus_per_trial)
    runner._dispatch(None, params, knobs, None, purpose=Purpose.PROXY, model=proxy)
    return True


def enqueue_next(runner: Runner) -> None:
    """Hand Optuna the next config: a leader's next micro-batch up where its measured peak
    leaves room for it (search/micro_batch_up.py), else the next queued one (a seed), else the
    throughput model's proposal."""
    if _waiting(runner.optuna):
        return
    params = runner.policy.next_micro_batch_up(taken(runner))
    if params is None and runner._queue:
        params = runner._queue.pop(0)
    if params is not None:
        runner.optuna.enqueue_trial(params, skip_if_exists=False)
        return
    _enqueue_guided(runner)


def _enqueue_guided(runner: Runner) -> None:
    """Queue the throughput model's proposal for the next ask, once the seeds have run
    (Optuna still records and learns from it; with none, the sampler proposes)."""
    if _waiting(runner.optuna):
        return
    done = taken(runner)
    params = runner.policy.suggest(done, running_params(runner))
    while params is None and runner._later_seeds:
        # The model has nothing worth a trial: the expert's alternatives that waited.
        seed = runner._later_seeds.pop(0)
        params = None if canonical_params(seed) in done else seed
    if params is not None:
        runner.optuna.enqueue_trial(params, skip_if_exists=False)


def taken(runner: Runner) -> set[str]:
    """Configs the throughput model must not propose: measured, pruned, failed, running,
    or left out for time."""
    running = {canonical_params(f.params) for f in runner.in_flight.values()}
    return set(runner.measured) | runner.attempted | running | runner._late


def running_params(runner: Runner) -> list[Params]:
    """The configs of the search's trials running now: with several GPUs, the next
    proposal is made while they run (the proposer avoids their kinds where it can)."""
    return [f.params for f in runner.in_flight.values() if f.purpose not in END_CHECKS]


def _waiting(study: Study) -> list[FrozenTrial]:
    """Optuna's queued trials not asked yet (a config handed to it for its next ask)."""
    return study.get_trials(deepcopy=False, states=(OptunaState.WAITING,))
