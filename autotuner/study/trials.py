"""A study's trials in the database and on the executor: dispatch, prune, finish, cancel.

The crash-safety order lives here: `TrialBook.dispatch` commits a trial's row (state running,
with its number) before it submits the task, so a coordinator that dies between the two leaves a
running row that the next one marks lost and retries. A result is committed by `finish` before
the caller tells the sampler, and a trial leaves `in_flight` only once its result is stored.

Both are idempotent, for the faults in between:
- a dispatch whose commit was acknowledged with an error although it committed, or whose
  submit failed after the commit, leaves a running row with no task: `reconcile` submits that
  row's own config (never a second row for the same trial);
- a result whose commit acknowledgement was lost is written again by a later round, finds the
  row already in that state, and counts as stored (`TrialAlreadyFinished` with the same state).
Every write carries the coordinator's owner id: after another coordinator took the study, the
repository refuses it (`LeaseLost`) and this one stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna

from autotuner.executors.base import Executor, Target
from autotuner.options import StudyOptions
from autotuner.purpose import END_CHECKS, Purpose
from autotuner.search.objective import Objective, objective_value
from autotuner.search.policy import Prune, SearchPolicy
from autotuner.search.sampler import Observation
from autotuner.search.space import SearchSpace
from autotuner.spec import (
    Device,
    FailureClass,
    Knobs,
    MeasureSettings,
    ModelSpec,
    TrialConfig,
    TrialResult,
    TrialStatus,
    canonical_params,
)
from autotuner.storage.common import TrialAlreadyFinished
from autotuner.storage.models import Trial, TrialState
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.events import Event, OnEvent
from autotuner.study.lost import LOST_LIMIT, crash_loop_message, lost_in_a_row, rerun_allowed


@dataclass
class InFlight:
    """A dispatched trial whose result has not been stored yet."""

    trial_id: int
    number: int
    ask: optuna.Trial | None  # None for a re-measurement: the sampler is not told
    params: dict[str, Any]
    attempt: int
    purpose: str = Purpose.SEARCH
    heartbeat_at: float = field(default_factory=time.monotonic)
    retry_of: int | None = None
    # The knobs that ran where they differ from `params`: an end check's row carries the
    # params of the candidate it checks while its config runs others (a numerics reference
    # at bf16, a multi-GPU study's reference on one GPU). What a watcher shows as run.
    ran: dict[str, Any] = field(default_factory=dict)


def knobs_that_differ(params: dict[str, Any], config: TrialConfig) -> dict[str, Any]:
    """The config's knob values where they differ from the params named in the row."""
    knobs = config.knobs.model_dump(mode="json")
    return {k: knobs[k] for k in params if k in knobs and knobs[k] != params[k]}


def retried_once(purpose: str, attempt: int) -> bool:
    """Whether a failure of the config's own process (timeout, crash, infra) earns its one
    retry. A lost trial (our side failed, not the config) is run again without spending it:
    study/lost.py.

    A re-measurement does not: its interleaved plan moves on (search/remeasure.py); nor does a
    multi-GPU study's one-GPU reference (its scaling is then reported as not measured), nor a
    parity trial (search/numerics.py runs it again itself, once, as a new row). The same rule
    holds in process and after a restart.
    """
    return attempt == 1 and purpose != Purpose.REMEASURE and purpose not in END_CHECKS


def trial_config(
    study_id: str,
    model: ModelSpec,
    space: SearchSpace,
    target: Target,
    gpus_per_trial: int,
    knobs: Knobs,
    number: int | None,
    *,
    abandon_below: float | None = None,
    attention_probe: bool = True,
) -> TrialConfig:
    """The record the worker runs; on a CPU-only cluster the trial runs on the CPU.
    `abandon_below`: the early-stop floor of a search trial (search/early_stop.py);
    `attention_probe` False: a trial of the study already ran this attention kernel."""
    measure: MeasureSettings = space.measure
    if abandon_below is not None:
        measure = measure.model_copy(update={"abandon_below_tokens_per_s": abandon_below})
    if not attention_probe:
        measure = measure.model_copy(update={"attention_probe": False})
    num_gpus = gpus_per_trial
    if target.device_type == "cpu":
        measure = measure.model_copy(update={"device": Device.CPU})
        num_gpus = 0
    return TrialConfig(
        study_id=study_id,
        trial_number=number,
        model=model,
        knobs=knobs,
        measure=measure,
        num_gpus=num_gpus,
    )


def reference_knobs(knobs: Knobs) -> Knobs:
    """`knobs` for one GPU: every multi-GPU setting at its default (they do nothing there)."""
    defaults = Knobs()
    multi = (
        "parallel",
        "nccl_algo",
        "nccl_proto",
        "nccl_min_channels",
        "nccl_max_channels",
        "nccl_buffsize",
        "ddp_bucket_cap_mb",
        "ddp_grad_as_bucket_view",
        "ddp_static_graph",
        "grad_compression",
        "fsdp_reduce_dtype",
    )
    return knobs.model_copy(update={name: getattr(defaults, name) for name in multi})


@dataclass(frozen=True)
class Outcome:
    """How a finished trial is stored and told: its state, value and observation."""

    state: TrialState
    value: float | None
    error_class: FailureClass | None
    message: str | None
    observation: Observation
    retry: bool  # an infra failure that earns its one retry


def outcome(
    flight: InFlight,
    result: TrialResult,
    policy: SearchPolicy,
    objective: Objective,
    gpus_per_trial: int,
    options: StudyOptions,
) -> Outcome:
    """Classify a result: OK is complete; a config failure (OOM, unsupported, ...) is
    infeasible, told with a violated constraint; an infra failure is failed, told as FAIL."""
    params = flight.params
    if result.status == TrialStatus.OK:
        value = objective_value(objective, result, gpus_per_trial, options)
        obs = Observation(params, value, policy.violation(params, result))
        return Outcome(TrialState.COMPLETE, value, None, None, obs, retry=False)
    fclass = result.failure_class or FailureClass.INFRA
    if fclass.is_config_failure:
        obs = Observation(params, 0.0, policy.violation(params, result))
        return Outcome(TrialState.INFEASIBLE, None, fclass, result.error_message, obs, False)
    # An environment failure ends the study (study/ending.py): a retry would fail the same way.
    retry = fclass != FailureClass.ENVIRONMENT and retried_once(flight.purpose, flight.attempt)
    obs = Observation(params, None)
    return Outcome(TrialState.FAILED, None, fclass, result.error_message, obs, retry)


def lost_outcome(flight: InFlight, result: TrialResult, streak: int) -> Outcome:
    """A trial the cluster failed under (`Completed.lost`): lost, and run again without
    spending the config's retry, unless it is the LOST_LIMIT-th loss in a row (study/lost.py):
    then a crash of the config, with the reason. Told to the sampler as FAIL either way."""
    why = f"the Ray cluster failed under it: {result.error_message or 'no reason given'}"
    obs = Observation(flight.params, None)
    if streak >= LOST_LIMIT:
        message = crash_loop_message(streak, why)
        retry = retried_once(flight.purpose, flight.attempt)
        return Outcome(TrialState.FAILED, None, FailureClass.CRASH, message, obs, retry)
    message = f"{why}; run again, not charged to the config"[:2000]
    return Outcome(TrialState.LOST, None, FailureClass.INFRA, message, obs, retry=True)


@dataclass
class History:
    """What a study's trial rows say, for a coordinator that (re)starts it."""

    launched: int  # trials that count against max_trials: not pruned, not retries
    observations: list[Observation]  # for the sampler, in trial order
    measured: dict[str, Observation]  # canonical params -> what it gave (pruned excluded)
    retries: list[tuple[dict[str, Any], int]]  # (params, number retried) still owed a retry
    attempted: set[str]  # canonical params of every candidate trial ever run (failed too)


def history(trials: list[Trial], policy: SearchPolicy) -> History:
    """Feed each row to the policy and collect what the coordinator rebuilds from them."""
    launched = sum(1 for t in trials if t.state != TrialState.PRUNED and t.retry_of is None)
    past = History(launched, [], {}, [], set())
    for t in trials:
        policy.observe_row(t, fit=False)  # one refit after the last row, not one per row
        if t.purpose not in END_CHECKS:
            past.attempted.add(canonical_params(t.params))
        obs = policy.observation(t)
        if obs is None:
            continue
        past.observations.append(obs)
        if t.state != TrialState.PRUNED:
            past.measured[canonical_params(t.params)] = obs
        if t.retried:
            continue
        if t.state == TrialState.FAILED and retried_once(t.purpose, t.attempt):
            past.retries.append((t.params, t.number))
        elif t.state == TrialState.LOST and rerun_allowed(t.purpose):
            # Lost to our side, not the config: run again at the same attempt (study/lost.py;
            # a loss that completed a crash loop was stored as failed at takeover).
            past.retries.append((t.params, t.number))
    policy.refit()
    return past


class TrialBook:
    """The trial rows of one study and the tasks behind them (`in_flight`, by handle)."""

    def __init__(
        self,
        db: Database,
        study_id: str,
        executor: Executor,
        on_event: OnEvent,
        owner: str | None = None,
    ) -> None:
        self.db = db
        self.study_id = study_id
        self.executor = executor
        self.on_event = on_event
        self.owner = owner  # every write is fenced by the study's lease (None: unfenced)
        self.in_flight: dict[str, InFlight] = {}
        self._maybe_orphaned = False  # a dispatch failed: a running row may have no task

    def dispatch(
        self,
        ask: optuna.Trial | None,
        params: dict[str, Any],
        config_for: Callable[[int], TrialConfig],
        *,
        retry_of: int | None,
        purpose: str,
    ) -> InFlight:
        """Commit a running row (marking the original of a retry as retried), then submit.

        If this raises, the row may have committed anyway (a lost acknowledgement) or the
        submit may have failed after it did: `reconcile` looks before the next dispatch."""
        orphans_before = self._maybe_orphaned
        self._maybe_orphaned = True  # until the trial is in flight
        attempt = 2 if retry_of is not None else 1
        with self.db.session() as s:
            trials = TrialRepo(s)
            if retry_of is not None:
                original = trials.get(self.study_id, retry_of)
                if original is not None:
                    original.retried = True
                    # A lost trial's re-run keeps its attempt: the loss was ours, not the
                    # config's, so its one retry is still there (study/lost.py).
                    lost = original.state == TrialState.LOST.value
                    attempt = original.attempt if lost else original.attempt + 1
            row = trials.create_running(
                self.study_id,
                params=params,
                config={},
                retry_of=retry_of,
                attempt=attempt,
                purpose=purpose,
                owner=self.owner,
            )
            config = config_for(row.number)
            row.config = config.model_dump(mode="json")
            trial_id, number = row.id, row.number
        # Only now, with the row committed: a crash from here on leaves a row to reconcile.
        handle = self.executor.submit(config)
        flight = InFlight(
            trial_id,
            number,
            ask,
            params,
            attempt,
            purpose,
            retry_of=retry_of,
            ran=knobs_that_differ(params, config),
        )
        self.in_flight[handle] = flight
        self._maybe_orphaned = orphans_before
        return flight

    def reconcile(self) -> list[InFlight]:
        """Submit the running rows that have no task behind them, after a failed dispatch.

        While this coordinator holds the lease every running row of the study is its own and
        should be in flight; one that is not was committed by a dispatch that then raised. Its
        own config is submitted (same row, same number): the dispatch completes, it is not
        repeated. Returns the trials submitted (the sampler was told their ask failed)."""
        if not self._maybe_orphaned:
            return []
        known = {f.trial_id for f in self.in_flight.values()}
        with self.db.read() as s:
            running = TrialRepo(s).list(self.study_id, states=[TrialState.RUNNING])
            orphans = [t for t in running if t.id not in known]
        out = []
        for row in orphans:
            config = TrialConfig.model_validate(row.config)
            handle = self.executor.submit(config)
            flight = InFlight(
                row.id,
                row.number,
                None,
                row.params,
                row.attempt,
                row.purpose,
                retry_of=row.retry_of,
                ran=knobs_that_differ(row.params, config),
            )
            self.in_flight[handle] = flight
            out.append(flight)
        self._maybe_orphaned = False
        return out

    def lost_streak(self, flight: InFlight) -> int:
        """How many times in a row this trial's config has been lost, this loss included."""
        with self.db.read() as s:
            trials = TrialRepo(s)
            row = s.get(Trial, flight.trial_id)
            assert row is not None
            return lost_in_a_row(row, lambda n: trials.get(self.study_id, n))

    def record_pruned(
        self,
        params: dict[str, Any],
        config: TrialConfig,
        prune: Prune,
        purpose: str = Purpose.SEARCH,
    ) -> int:
        """Store a proposal ruled out before launch (a seed's keeps its purpose); returns its
        trial number."""
        with self.db.session() as s:
            t = TrialRepo(s).create_pruned(
                self.study_id,
                params=params,
                config=config.model_dump(mode="json"),
                error_class=prune.error_class,
                error_message=prune.message,
                owner=self.owner,
                purpose=purpose,
            )
            if prune.result is not None:  # a predicted OOM keeps its numbers
                t.result = prune.result.model_dump(mode="json")
            return t.number

    def finish(
        self,
        flight: InFlight,
        state: TrialState,
        result: TrialResult | None,
        error_class: FailureClass | None,
        message: str | None,
        value: float | None = None,
        worker: str | None = None,
        *,
        retried: bool = False,
    ) -> None:
        """Store a trial's end (one transaction); it stays in `in_flight` for the caller.
        `retried`: it failed and is to run once more (said in its event)."""
        try:
            with self.db.session() as s:
                trials = TrialRepo(s)
                row = s.get(Trial, flight.trial_id)
                assert row is not None
                if worker:
                    row.worker = worker
                trials.finish(
                    row,
                    state,
                    result=result.model_dump(mode="json") if result else None,
                    objective_value=value,
                    error_class=error_class.value if error_class else None,
                    error_message=message,
                    owner=self.owner,
                )
        except TrialAlreadyFinished:
            # Stored already in this very state: an earlier write committed and only its
            # acknowledgement was lost. Any other state (lost: another coordinator took the
            # study) is not ours to overwrite.
            with self.db.read() as s:
                stored = s.get(Trial, flight.trial_id)
                if stored is None or stored.state != state.value:
                    raise
        self.on_event(
            Event(
                "finished",
                flight.number,
                flight.params,
                state,
                result.tokens_per_s if result else None,
                message,
                flight.purpose,
                retried,
                ran=flight.ran,
                loss_curve=list(result.loss_curve) if result and result.loss_curve else None,
            )
        )

    def cancel_all(self) -> None:
        """Cancel every trial in flight and store each as failed."""
        for handle in list(self.in_flight):
            self.executor.cancel(handle)
            self.finish(
                self.in_flight[handle],
                TrialState.FAILED,
                None,
                FailureClass.INFRA,
                "cancelled with the study",
            )
            del self.in_flight[handle]
