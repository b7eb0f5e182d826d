"""Optuna glue: a search space as Optuna distributions, samplers, and a study rebuilt from our DB.

The Optuna study lives in memory and our database is the single source of truth: on start (or
restart) the coordinator replays every recorded trial into a fresh in-memory study with
`add_trial`. That keeps Optuna's tables out of our schema and our migration chain, and a restart
can never disagree with what the trials table says.

Infeasible trials (OOM, unsupported, ruled out) are told as COMPLETE with value 0 and a violated
constraint (`set_constraint`), not as FAIL: samplers ignore FAIL trials and would propose the
same impossible config again.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import TrialState as OptunaState

from autotuner.search.space import IntRange, SearchSpace

FEASIBLE = "feasible"  # the one constraint key: <= 0 feasible, > 0 violated
SAMPLERS = ("tpe", "random", "grid", "gp")

optuna.logging.set_verbosity(optuna.logging.WARNING)


def distributions(space: SearchSpace) -> dict[str, BaseDistribution]:
    out: dict[str, BaseDistribution] = {}
    for name, domain in space.knobs.items():
        if isinstance(domain, IntRange):
            out[name] = IntDistribution(domain.low, domain.high, log=domain.log, step=domain.step)
        else:
            out[name] = CategoricalDistribution([_plain(v) for v in domain])
    return out


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)


def make_sampler(name: str, space: SearchSpace, seed: int) -> optuna.samplers.BaseSampler:
    """TPE (multivariate, constant liar for parallel trials) by default; others by name."""
    if name == "tpe":
        with warnings.catch_warnings():  # multivariate/group are "experimental" in Optuna
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(
                seed=seed,
                multivariate=True,
                group=True,
                constant_liar=True,
                n_startup_trials=min(8, max(3, len(space.knobs))),
            )
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        grid: dict[str, list[Any]] = {}
        for knob, domain in space.knobs.items():
            if isinstance(domain, IntRange):
                grid[knob] = list(range(domain.low, domain.high + 1, domain.step))
            else:
                grid[knob] = [_plain(v) for v in domain]
        return _AskTellGridSampler(grid, seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")


class _AskTellGridSampler(optuna.samplers.GridSampler):
    """GridSampler for ask-and-tell: Optuna's stops the study once the grid is visited, which
    only works inside `study.optimize`. Here the coordinator notices the repeats instead (a
    fully visited grid proposes measured configs only, and the study ends as exhausted)."""

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        return None


def grid_exhausted(study: optuna.Study) -> bool:
    """A grid sampler has proposed every grid point and each has finished: asking again only
    repeats one (with a warning from Optuna each time). False for any other sampler, and
    while a proposal of the study's own is waiting (an enqueued config is no grid point)."""
    sampler = study.sampler
    if not isinstance(sampler, optuna.samplers.GridSampler):
        return False
    if study.get_trials(deepcopy=False, states=(OptunaState.WAITING,)):
        return False
    return sampler.is_exhausted(study)


def new_study(space: SearchSpace, sampler: str, seed: int) -> optuna.Study:
    return optuna.create_study(direction="maximize", sampler=make_sampler(sampler, space, seed))


@dataclass(frozen=True)
class Observation:
    """A finished trial as the sampler sees it."""

    params: dict[str, Any]
    value: float | None  # None for an infra failure (told as FAIL)
    violation: float = 0.0  # > 0: infeasible by this much


def tell(study: optuna.Study, trial: optuna.Trial, obs: Observation) -> None:
    if obs.value is None:
        study.tell(trial, state=OptunaState.FAIL)
        return
    trial.set_constraint(FEASIBLE, obs.violation)
    study.tell(trial, obs.value)


def replay(study: optuna.Study, space: SearchSpace, observations: Iterable[Observation]) -> int:
    """Add recorded trials to a fresh study; skips params that no longer fit the space."""
    dists = distributions(space)
    added = 0
    for obs in observations:
        params = {k: v for k, v in obs.params.items() if k in dists}
        if set(params) != set(dists) or not all(_fits(dists[k], v) for k, v in params.items()):
            continue
        if obs.value is None:
            frozen = optuna.trial.create_trial(
                state=OptunaState.FAIL, params=params, distributions=dists
            )
        else:
            frozen = optuna.trial.create_trial(
                value=obs.value,
                params=params,
                distributions=dists,
                constraints={FEASIBLE: obs.violation},
            )
        study.add_trial(frozen)
        added += 1
    return added


def _fits(dist: BaseDistribution, value: Any) -> bool:
    try:
        return dist._contains(dist.to_internal_repr(value))
    except (ValueError, TypeError):
        return False
