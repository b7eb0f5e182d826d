"""The end of a study: what the runner launches once its search is over.

One trial at a time, in this order: the re-measurement of the top candidates in fresh processes
(interleaved A B A B, the plan is search/policy.py's), with a multi-GPU study's one-GPU
`reference` trial among them; then the `headroom` check of the config the recommendation would
pick (search/headroom_check.py: an evaluation pass and a checkpoint save for its real peak);
and its numerics check (search/numerics.py). Where that config changes numerics, the `parity-ref`
trial (its knobs at the reference precision) runs first, then the headroom check runs the
candidate's parity steps before its warm-up: both checks in one process and one compile. With
no headroom check (options.headroom 0) the candidate's steps are a `parity` trial of their own.
A config that fails either check is passed over, and the next one is checked in turn. These
are functions of the runner (`coordinator.StudyRunner`), which `Runner` types by what they use
of it, and its state (`launched`, the exhausted flag) stays the runner's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import optuna

from autotuner.executors.base import Target
from autotuner.options import StudyOptions
from autotuner.purpose import Purpose
from autotuner.search import headroom_check
from autotuner.search.numerics import (
    PARITY_STEPS,
    candidate_knobs,
    headroom_plan,
    next_parity,
    verdict,
)
from autotuner.search.policy import SearchPolicy
from autotuner.search.space import SearchSpace
from autotuner.spec import (
    FailureClass,
    Knobs,
    ModelSpec,
    Precision,
    TrialConfig,
    TrialResult,
    TrialStatus,
    canonical_params,
)
from autotuner.storage.models import Trial, TrialState
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.budget import Budget
from autotuner.study.events import Event
from autotuner.study.measurements import ConfigMeasurements, group_measurements
from autotuner.study.trials import InFlight, Outcome, TrialBook, reference_knobs, trial_config
from autotuner.types import Params


class Runner(Protocol):
    """What the end of a study reads and changes on its runner (coordinator.StudyRunner)."""

    db: Database
    study_id: str
    space: SearchSpace
    model: ModelSpec
    target: Target
    gpus_per_trial: int
    max_trials: int | None
    options: StudyOptions
    policy: SearchPolicy
    budget: Budget
    trials: TrialBook
    launched: int
    _exhausted: bool

    @property
    def in_flight(self) -> dict[str, InFlight]: ...

    def on_event(self, event: Event) -> None: ...

    def _config(self, knobs: Knobs, number: int | None) -> TrialConfig: ...

    def _dispatch(
        self,
        ask: optuna.Trial | None,
        params: Params,
        knobs: Knobs,
        retry_of: int | None,
        purpose: str | None = None,
    ) -> None: ...


def launch_remeasure(runner: Runner) -> bool:
    """After the search: re-measure the top candidates in fresh processes, one at a time,
    interleaved A B A B (the plan is autotuner/policy.py's); then the numerics check."""
    if runner.in_flight:
        return False  # the candidates are known once every search trial has reported
    plan = runner.policy.time_plan
    said = plan.remeasure_note
    planned = plan.next_remeasure(runner.max_trials, runner.budget.time_left())
    if plan.remeasure_note is not None and said is None:
        runner.on_event(Event("remeasure_cut", message=plan.remeasure_note))
    if planned is None:
        said = plan.checks_note
        if plan.end_checks_cut(runner.max_trials, runner.budget.time_left()):
            if said is None:
                runner.on_event(Event("checks_cut", message=plan.checks_note))
            runner._exhausted = True
            return False
        return launch_headroom(runner) or launch_parity(runner)
    params, purpose = planned
    if purpose == Purpose.REFERENCE:
        dispatch_reference(runner, params)
        return True
    knobs = runner.space.knobs_for(params, runner.model, runner.gpus_per_trial)
    runner._dispatch(None, params, knobs, None, purpose=purpose)
    return True


def dispatch_reference(runner: Runner, params: Params) -> None:
    """The best config on one GPU (every multi-GPU knob at its default), for the
    recommendation's scaling efficiency: per-GPU rate at k GPUs / rate on one."""
    knobs = reference_knobs(runner.space.knobs_for(params, runner.model, runner.gpus_per_trial))
    _dispatch_check(
        runner,
        params,
        Purpose.REFERENCE,
        lambda n: trial_config(
            runner.study_id, runner.model, runner.space, runner.target, 1, knobs, n
        ),
    )


def _dispatch_check(
    runner: Runner, params: Params, purpose: str, config_for: Callable[[int], TrialConfig]
) -> None:
    """Dispatch one end check (never told to the sampler) and count it as launched."""
    flight = runner.trials.dispatch(None, params, config_for, retry_of=None, purpose=purpose)
    runner.launched += 1
    runner.on_event(Event("launched", flight.number, params, TrialState.RUNNING))


def _with_measure(runner: Runner, knobs: Knobs, **measure: Any) -> Callable[[int], TrialConfig]:
    """The study's trial config for these knobs, with `measure` settings changed."""

    def config_for(number: int) -> TrialConfig:
        config = runner._config(knobs, number)
        return config.model_copy(update={"measure": config.measure.model_copy(update=measure)})

    return config_for


def _candidates(runner: Runner) -> tuple[list[Trial], list[ConfigMeasurements]]:
    """The study's trial rows, and its candidates less those that failed a headroom check."""
    with runner.db.read() as s:
        trials = TrialRepo(s).list(runner.study_id)
    ranked = group_measurements(trials, runner.options)
    room = headroom_check.checks_of(ranked, trials, runner.options)
    return trials, headroom_check.surviving(ranked, room)


def launch_headroom(runner: Runner) -> bool:
    """The headroom check of the config the recommendation would pick: once more, with an
    evaluation pass and a checkpoint save after the timed repeats (search/headroom_check.py).
    Where that config is due a numerics check, the reference parity trial goes first and this
    check then runs the candidate's parity steps too (numerics.headroom_plan). False when no
    check is due now."""
    with runner.db.read() as s:
        trials = TrialRepo(s).list(runner.study_id)
    ranked = group_measurements(trials, runner.options)
    group = headroom_check.next_check(ranked, trials, runner.options)
    if group is None:
        return False
    plan = "alone"
    if runner.options.numerics_check:
        alive = headroom_check.surviving(
            ranked, headroom_check.checks_of(ranked, trials, runner.options)
        )
        room = None if runner.max_trials is None else runner.max_trials - runner.launched
        plan = headroom_plan(group, alive, trials, room=room)
    if plan == "reference first":
        return False  # launch_parity runs the numerics reference; this check follows it
    measure: dict[str, Any] = {"headroom_check": True}
    if plan == "with parity":
        # The numerics check's candidate run too: its parity steps before the warm-up, in the
        # same process and compile (a Llama 3B fp8 check's own process, build and warm compile
        # were ~65 s of a 10-minute study on the H200: bench/results/h200_session_20261202).
        measure["parity_steps"] = PARITY_STEPS
    config_for = _with_measure(runner, candidate_knobs(group), **measure)
    _dispatch_check(runner, group.first.params, Purpose.HEADROOM, config_for)
    return True


def launch_parity(runner: Runner) -> bool:
    """Last: the numerics check of the config the recommendation would pick, if its
    precision changes numerics (search/numerics.py), one parity trial at a time: the
    reference precision first, then the candidate. The trial rows are the plan's state."""
    trials, candidates = _candidates(runner)
    planned = next_parity(candidates, trials) if runner.options.numerics_check else None
    if planned is None:
        runner._exhausted = True
        return False
    group, purpose = planned
    knobs = candidate_knobs(group)
    if purpose == Purpose.PARITY_REFERENCE:
        # Neither bf16 nor fp32 runs it here (not expected): the worker's refusal is
        # stored, and the check reported as not done, rather than skipped silently.
        # On a graph the study already compiled where one differs in nothing else: a warm
        # compile in place of a cold one (numerics.warm_reference), as the end-time plan
        # expected (the policy's reference_knobs: one answer for both).
        knobs = runner.policy.reference_knobs(knobs) or knobs.model_copy(
            update={"precision": Precision.FP32}
        )
    # One micro-batch per optimizer step, for the reference and the candidate alike: the
    # precision's numerics (overflow, underflow, fp8 scaling) show in every micro-step's
    # forward and backward, and the check costs 1/grad_accum of the steps' time (a Llama 3B
    # parity step at the held global batch is 4 micro-steps, about 1 s on the H200).
    knobs = knobs.model_copy(update={"grad_accum": 1})
    config_for = _with_measure(runner, knobs, parity_steps=PARITY_STEPS)
    _dispatch_check(runner, group.first.params, purpose, config_for)
    return True


def headroom_outcome(out: Outcome) -> Outcome:
    """A headroom trial has no objective value: it checks a candidate, it is none itself.
    Its verdict is read from its row (search/headroom_check.py)."""
    return dataclasses.replace(out, value=None)


def parity_outcome(runner: Runner, flight: InFlight, result: TrialResult, out: Outcome) -> Outcome:
    """A parity trial has no objective value; a candidate whose curve leaves the
    reference's is stored infeasible, class numerics, with the measured difference (a
    headroom check that ran the candidate's parity steps too, as a parity trial would be)."""
    out = dataclasses.replace(out, value=None)
    if flight.purpose not in (Purpose.PARITY, Purpose.HEADROOM) or result.status != TrialStatus.OK:
        return out
    key = canonical_params(flight.params)
    with runner.db.read() as s:
        refs = [
            t
            for t in TrialRepo(s).list(runner.study_id)
            if t.purpose == Purpose.PARITY_REFERENCE and canonical_params(t.params) == key
        ]
    if not refs:
        return out
    check = verdict(result, refs[-1])
    if check.state != "failed":
        return out
    return dataclasses.replace(
        out,
        state=TrialState.INFEASIBLE,
        error_class=FailureClass.NUMERICS,
        message=f"numerics check: {check.text}",
    )
