"""The coordinator: one study's state machine, the single writer of that study.

`StudyRunner.step()` does one round: collect finished trials (record + tell), cancel if asked,
fill free executor slots with new trials (ask, rule out, dispatch), keep heartbeats and the lease
fresh, and finish the study when its budget is spent. `run()` loops over `step()`.

Every state change is its own database transaction, written before the next action depends on
it: a trial row exists (state running, with its number) before its task is submitted, and its
result is stored before the sampler is told. A coordinator that dies therefore leaves rows that
a new one can reconcile: running trials become `lost` and are retried once.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState as OptunaState

from autotuner.executors.base import Completed, Executor
from autotuner.options import StudyOptions
from autotuner.search.objective import Objective, objective_value
from autotuner.search.policy import Prune, SearchPolicy
from autotuner.search.sampler import Observation, distributions, new_study, replay, tell
from autotuner.search.space import SearchSpace
from autotuner.spec import (
    Device,
    FailureClass,
    MeasureSettings,
    ModelSpec,
    TrialConfig,
    TrialResult,
    TrialStatus,
    canonical_params,
)
from autotuner.storage.models import Study, StudyStatus, Trial, TrialState
from autotuner.storage.repository import StudyRepo, TrialRepo
from autotuner.storage.session import Database
from autotuner.study.recommend import recommend

# How many proposals in a row may be ruled out or repeat a measured config before we conclude
# the sampler has nothing new to offer (a small space fully explored).
MAX_IDLE_PROPOSALS = 200


@dataclass(frozen=True)
class Event:
    """Something a watcher (progress bar, log) may want to show."""

    kind: str  # launched | finished | pruned | retry | done
    trial_number: int | None = None
    params: dict[str, Any] | None = None
    state: str | None = None
    tokens_per_s: float | None = None
    message: str | None = None


@dataclass
class _InFlight:
    trial_id: int
    number: int
    ask: optuna.Trial | None  # None for a re-measurement: the sampler is not told
    params: dict[str, Any]
    attempt: int
    purpose: str = "search"
    heartbeat_at: float = field(default_factory=time.monotonic)


def default_owner() -> str:
    # The lease column holds 64 characters: keep the hostname part short.
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class StudyRunner:
    """Drives one study to completion on an executor."""

    def __init__(
        self,
        db: Database,
        study_id: str,
        executor: Executor,
        *,
        owner: str | None = None,
        on_event: Callable[[Event], None] | None = None,
        heartbeat_interval_s: float = 5.0,
        lease_ttl_s: float = 60.0,
        poll_s: float = 0.5,
    ) -> None:
        self.db = db
        self.study_id = study_id
        self.executor = executor
        self.owner = owner or default_owner()
        self.on_event = on_event or (lambda e: None)
        self.heartbeat_interval_s = heartbeat_interval_s
        self.lease_ttl_s = lease_ttl_s
        self.poll_s = poll_s
        self.in_flight: dict[str, _InFlight] = {}
        self.retry_queue: list[tuple[dict[str, Any], int]] = []  # (params, number retried)
        self.measured: dict[str, Observation] = {}  # canonical params -> what it gave
        self.done = False
        self._last_heartbeat = 0.0
        self._idle_proposals = 0
        self._exhausted = False
        self._search_exhausted = False

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        """Take the lease, reconcile orphaned trials, rebuild the sampler from the database."""
        with self.db.session() as s:
            studies = StudyRepo(s)
            if not studies.try_acquire(self.study_id, self.owner, self.lease_ttl_s):
                raise RuntimeError(
                    f"study {self.study_id} is being run by another coordinator; "
                    f"wait for its lease to expire ({self.lease_ttl_s:.0f} s) or cancel it"
                )
            study = studies.require(self.study_id)
            self.space = SearchSpace.model_validate(study.space)
            self.model = ModelSpec.model_validate(study.model_spec)
            self.objective = Objective(study.objective)
            self.max_trials = study.max_trials
            self.max_minutes = study.max_minutes
            self.gpus_per_trial = study.gpus_per_trial
            self.options = study.options
            self.sampler_name, self.seed = study.sampler, study.seed
            if study.status in (StudyStatus.COMPLETED, StudyStatus.CANCELLED, StudyStatus.FAILED):
                self.done = True
                return
            if study.status == StudyStatus.QUEUED:
                studies.set_status(study, StudyStatus.RUNNING)
            self.started_at = study.started_at or dt.datetime.now(dt.UTC)
            # We hold the lease, so every trial still marked running belongs to a dead owner.
            far_future = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
            for lost in TrialRepo(s).mark_lost(self.study_id, heartbeat_older_than=far_future):
                self.on_event(Event("lost", lost.number, lost.params, TrialState.LOST))
        self.target = self.executor.target()
        too_big = self.target.device_type == "cuda" and self.gpus_per_trial > self.target.gpus_total
        if too_big:
            # It could never be scheduled: say so and stop, rather than wait forever for GPUs.
            self._fail_study(
                f"each trial asks for {self.gpus_per_trial} GPUs but the cluster has "
                f"{self.target.gpus_total}; resubmit with --gpus {self.target.gpus_total} "
                f"or fewer, or add GPU workers to the cluster"
            )
            return
        self.optuna = new_study(self.space, self.sampler_name, self.seed)
        self.distributions = distributions(self.space)
        # Rules, cost model, seeding, re-measurement and early stop (autotuner/policy.py).
        self.policy = SearchPolicy(
            space=self.space,
            model=self.model,
            target=self.target,
            gpus_per_trial=self.gpus_per_trial,
            objective=self.objective,
            options=self.options,
        )
        self._rebuild()

    def _rebuild(self) -> None:
        with self.db.session() as s:
            trials = TrialRepo(s).list(self.study_id)
            self.launched = sum(
                1 for t in trials if t.state != TrialState.PRUNED and t.retry_of is None
            )
            observations = []
            for t in trials:
                self.policy.observe_row(t)
                obs = self.policy.observation(t)
                if obs is None:
                    continue
                observations.append(obs)
                if t.state != TrialState.PRUNED:
                    self.measured[canonical_params(t.params)] = obs
                failed = t.state in (TrialState.FAILED, TrialState.LOST)
                if failed and _retried_once(t.purpose, t.attempt) and not t.retried:
                    self.retry_queue.append((t.params, t.number))
            replay(self.optuna, self.space, observations)
        if not trials:
            # The expert default first, so the study starts from a good config; then earlier
            # winners on this GPU and model family.
            for params in self.policy.seeds(self.db):
                self.optuna.enqueue_trial(params)

    # ------------------------------------------------------------------ loop

    def run(self) -> None:
        self.start()
        while not self.done:
            self.step()

    def step(self) -> None:
        """One round of the state machine (see the module docstring)."""
        if self.done:
            return
        self.advance(self.executor.collect(timeout_s=self.poll_s))

    def advance(self, completed: Iterable[Completed], *, max_launches: int | None = None) -> int:
        """One round without collecting: record `completed`, honour a cancel, launch up to
        `max_launches` trials (None: as many as the executor has slots for), keep the lease.

        A scheduler that shares one executor among many studies collects once and hands each
        runner its own results. If the database fails midway, the results not yet recorded stay
        in `in_flight`, so calling again with the same list records them. Returns how many
        trials were launched.
        """
        if self.done:
            return 0
        for item in completed:
            self._record(item)
        if self._cancel_requested():
            for handle in list(self.in_flight):
                self.executor.cancel(handle)
                self._finish_trial(
                    self.in_flight[handle],
                    TrialState.FAILED,
                    None,
                    FailureClass.INFRA,
                    "cancelled with the study",
                )
                del self.in_flight[handle]
            self._finish_study(StudyStatus.CANCELLED)
            return 0
        launched = self.launch(max_launches)
        self._keep_alive()
        if not self.in_flight and (self._budget_spent() or self._exhausted):
            self._finish_study(StudyStatus.COMPLETED)
        return launched

    def launch(self, max_count: int | None = None) -> int:
        """Dispatch up to max_count new trials while the budget and the executor allow."""
        launched = 0
        while (max_count is None or launched < max_count) and not self.done:
            if self._budget_spent() or self.executor.free_slots(self.gpus_per_trial) <= 0:
                break
            if not self._launch_next():
                break
            launched += 1
        return launched

    @property
    def wants_trials(self) -> bool:
        """Whether this runner would launch a trial if it had a free slot."""
        return not self.done and not self._exhausted and not self._budget_spent()

    # ------------------------------------------------------------------ launching

    def _launch_next(self) -> bool:
        """Dispatch one new trial; False when the sampler has nothing new to offer."""
        if not self.retry_queue and self._search_over():
            return self._launch_remeasure()
        while self._idle_proposals < MAX_IDLE_PROPOSALS:
            retry_of = None
            retry = self.retry_queue.pop(0) if self.retry_queue else None
            if retry is not None:
                params, retry_of = retry
                self.optuna.enqueue_trial(params, skip_if_exists=False)
            ask = self.optuna.ask(self.distributions)
            params = dict(ask.params)
            key = canonical_params(params)
            knobs = self.space.knobs_for(params, self.model, self.gpus_per_trial)
            if retry_of is None and key in self.measured:
                tell(self.optuna, ask, self.measured[key])  # a repeat: no GPU time spent
                self._idle_proposals += 1
                continue
            prune = self.policy.screen(params, knobs) if retry_of is None else None
            if prune is not None:
                self._record_pruned(ask, params, knobs, prune)
                self._idle_proposals += 1
                continue
            try:
                self._dispatch(ask, params, knobs, retry_of)
            except BaseException:
                # Nothing was dispatched (e.g. the database is down): put the retry back and
                # close the Optuna trial, so calling again later starts from a clean state.
                if retry is not None:
                    self.retry_queue.insert(0, retry)
                self.optuna.tell(ask, state=OptunaState.FAIL)
                raise
            self._idle_proposals = 0
            return True
        self._search_exhausted = True
        return self._launch_remeasure()

    def _record_pruned(
        self, ask: optuna.Trial, params: dict[str, Any], knobs: Any, prune: Prune
    ) -> None:
        config = self._config(knobs, None)
        with self.db.session() as s:
            t = TrialRepo(s).create_pruned(
                self.study_id,
                params=params,
                config=config.model_dump(mode="json"),
                error_class=prune.error_class,
                error_message=prune.message,
            )
            if prune.result is not None:  # a predicted OOM keeps its numbers
                t.result = prune.result.model_dump(mode="json")
            number = t.number
        obs = Observation(params, 0.0, prune.violation)
        tell(self.optuna, ask, obs)
        self.measured[canonical_params(params)] = obs
        self.on_event(Event("pruned", number, params, TrialState.PRUNED, message=prune.message))

    def _search_over(self) -> bool:
        elapsed = None
        if self.max_minutes:
            seconds = (dt.datetime.now(dt.UTC) - _aware(self.started_at)).total_seconds()
            elapsed = seconds / (self.max_minutes * 60)
        return self._search_exhausted or self.policy.search_over(
            self.launched, self.max_trials, elapsed
        )

    def _launch_remeasure(self) -> bool:
        """After the search: re-measure the top candidates in fresh processes, one at a time,
        interleaved A B A B (the plan is autotuner/policy.py's)."""
        if self.in_flight:
            return False  # the candidates are known once every search trial has reported
        params = self.policy.next_remeasure(self.max_trials)
        if params is None:
            self._exhausted = True
            return False
        knobs = self.space.knobs_for(params, self.model, self.gpus_per_trial)
        self._dispatch(None, params, knobs, None, purpose="remeasure")
        return True

    def _config(self, knobs: Any, number: int | None) -> TrialConfig:
        measure: MeasureSettings = self.space.measure
        num_gpus = self.gpus_per_trial
        if self.target.device_type == "cpu":
            measure = measure.model_copy(update={"device": Device.CPU})
            num_gpus = 0
        return TrialConfig(
            study_id=self.study_id,
            trial_number=number,
            model=self.model,
            knobs=knobs,
            measure=measure,
            num_gpus=num_gpus,
        )

    def _dispatch(
        self,
        ask: optuna.Trial | None,
        params: dict[str, Any],
        knobs: Any,
        retry_of: int | None,
        purpose: str | None = None,
    ) -> None:
        attempt = 2 if retry_of is not None else 1
        purpose = purpose or self.policy.purpose(params)
        with self.db.session() as s:
            trials = TrialRepo(s)
            if retry_of is not None:
                original = trials.get(self.study_id, retry_of)
                if original is not None:
                    original.retried = True
            row = trials.create_running(
                self.study_id,
                params=params,
                config={},
                retry_of=retry_of,
                attempt=attempt,
                purpose=purpose,
            )
            config = self._config(knobs, row.number)
            row.config = config.model_dump(mode="json")
            trial_id, number = row.id, row.number
        handle = self.executor.submit(config)
        if retry_of is None:
            self.launched += 1
        self.in_flight[handle] = _InFlight(trial_id, number, ask, params, attempt, purpose)
        kind = "retry" if retry_of is not None else "launched"
        self.on_event(Event(kind, number, params, TrialState.RUNNING))

    # ------------------------------------------------------------------ recording

    def _record(self, completed: Completed) -> None:
        flight = self.in_flight.get(completed.handle)
        if flight is None:
            return  # cancelled earlier; its late result is discarded
        result = completed.result
        retry = False
        if result.status == TrialStatus.OK:
            value = objective_value(self.objective, result, self.gpus_per_trial, self.options)
            self._finish_trial(
                flight, TrialState.COMPLETE, result, None, None, value, completed.worker
            )
            obs = Observation(flight.params, value, self.policy.violation(flight.params, result))
        else:
            fclass = result.failure_class or FailureClass.INFRA
            if fclass.is_config_failure:
                state = TrialState.INFEASIBLE
                obs = Observation(flight.params, 0.0, self.policy.violation(flight.params, result))
            else:
                state = TrialState.FAILED
                obs = Observation(flight.params, None)
                retry = _retried_once(flight.purpose, flight.attempt)
            self._finish_trial(
                flight, state, result, fclass, result.error_message, None, completed.worker
            )
        # Only once the result is stored: a failed write leaves the trial in flight, to be
        # recorded by a later call with the same result.
        del self.in_flight[completed.handle]
        if retry:
            self.retry_queue.append((flight.params, flight.number))
        self.policy.observe(flight.number, flight.params, result, flight.purpose)
        if flight.ask is not None:
            tell(self.optuna, flight.ask, obs)
        if obs.value is not None:
            self.measured[canonical_params(flight.params)] = obs

    def _finish_trial(
        self,
        flight: _InFlight,
        state: TrialState,
        result: TrialResult | None,
        error_class: FailureClass | None,
        message: str | None,
        value: float | None = None,
        worker: str | None = None,
    ) -> None:
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
            )
        self.on_event(
            Event(
                "finished",
                flight.number,
                flight.params,
                state,
                result.tokens_per_s if result else None,
                message,
            )
        )

    # ------------------------------------------------------------------ budget and upkeep

    def _budget_spent(self) -> bool:
        if self.max_minutes is not None:
            elapsed = (dt.datetime.now(dt.UTC) - _aware(self.started_at)).total_seconds()
            if elapsed >= self.max_minutes * 60:
                return True
        if self.max_trials is not None:
            # Retries do not count: a lost worker must not eat the user's budget.
            return self.launched >= self.max_trials and not self.retry_queue
        return False

    def _cancel_requested(self) -> bool:
        with self.db.session() as s:
            study = s.get(Study, self.study_id)
            return study is not None and study.status == StudyStatus.CANCELLED

    def _keep_alive(self) -> None:
        now = time.monotonic()
        if now - self._last_heartbeat < self.heartbeat_interval_s:
            return
        self._last_heartbeat = now
        with self.db.session() as s:
            if self.in_flight:
                TrialRepo(s).heartbeat([f.trial_id for f in self.in_flight.values()])
            if not StudyRepo(s).renew(self.study_id, self.owner, self.lease_ttl_s):
                raise RuntimeError(
                    f"lost the lease on study {self.study_id} to another coordinator"
                )

    def _fail_study(self, message: str) -> None:
        with self.db.session() as s:
            studies = StudyRepo(s)
            studies.set_status(
                studies.require(self.study_id), StudyStatus.FAILED, error_message=message
            )
            studies.release(self.study_id, self.owner)
        self.done = True
        self.on_event(Event("done", state=StudyStatus.FAILED, message=message))

    def _finish_study(self, status: StudyStatus) -> None:
        with self.db.session() as s:
            studies = StudyRepo(s)
            study = studies.require(self.study_id)
            trials = TrialRepo(s).list(self.study_id)
            evidence = self.policy.report(trials)
            evidence["stopped"] = self.policy.stop_reason(self._budget_spent())
            rec = recommend(
                trials, self.objective, options=self.options, evidence=True, extras=evidence
            )
            studies.set_best(study, rec["trial_number"] if rec else None, rec)
            if study.status != StudyStatus.CANCELLED or status == StudyStatus.CANCELLED:
                studies.set_status(study, status)
            studies.release(self.study_id, self.owner)
        self.done = True
        self.on_event(Event("done", state=status))


def _retried_once(purpose: str, attempt: int) -> bool:
    """Whether an infra failure (timeout, crash, lost) of this trial earns its one retry.

    A re-measurement does not: its interleaved plan moves on (autotuner/policy.py). The same
    rule holds in process and after a restart.
    """
    return attempt == 1 and purpose != "remeasure"


def _aware(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def create_study(
    db: Database,
    *,
    model: ModelSpec,
    space: SearchSpace,
    name: str | None = None,
    objective: Objective = Objective.TOKENS_PER_S,
    max_trials: int | None = None,
    max_minutes: float | None = None,
    gpus_per_trial: int = 1,
    sampler: str = "tpe",
    seed: int = 0,
    options: StudyOptions | None = None,
) -> str:
    """Record a new study (status queued) and return its id."""
    if max_trials is None and max_minutes is None:
        raise ValueError("a study needs a budget: give max_trials, max_minutes or both")
    with db.session() as s:
        study = StudyRepo(s).create(
            name=name or f"{model.preset or model.family.value} / {space.name}",
            model_spec=model.model_dump(mode="json"),
            space=space.model_dump(mode="json", by_alias=True),
            objective=objective.value,
            max_trials=max_trials,
            max_minutes=max_minutes,
            gpus_per_trial=gpus_per_trial,
            sampler=sampler,
            seed=seed,
            options=options,
        )
        return study.id
