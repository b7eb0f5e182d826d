"""The coordinator: one study's state machine, the single writer of that study.

`StudyRunner.step()` does one round: collect finished trials (record + tell), cancel if asked,
fill free executor slots with new trials (ask, rule out, dispatch), keep heartbeats and the lease
fresh, and finish the study when its budget is spent. `run()` loops over `step()`.
Its parts live beside it as functions over the runner: the seed plan at start and restart
(restore.py), the next config to ask (proposals.py), the end of the search and of the study
(finish.py) and, once the search is over, what it launches (re-measurement, the one-GPU
reference, the numerics parity trials: endgame.py).

Every state change is its own database transaction, written before the next action depends on
it: a trial row exists (state running, with its number) before its task is submitted
(`trials.TrialBook.dispatch`), and its result is stored before the sampler is told (`_record`).
A coordinator that dies therefore leaves rows that a new one can reconcile: running trials
become `lost` and are retried once (`lifecycle.StudyLease.take`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable

import optuna
from optuna.samplers import BaseSampler
from optuna.trial import TrialState as OptunaState

from autotuner.executors.base import Completed, Executor
from autotuner.purpose import END_CHECKS, SEARCH_TRIALS, Purpose
from autotuner.search.memory_history import Carried, carried_words, earlier_memory
from autotuner.search.policy import Prune, SearchPolicy
from autotuner.search.sampler import Observation, distributions, grid_exhausted, new_study, tell
from autotuner.search.seeding import SeedPlan
from autotuner.search.space import SearchSpace
from autotuner.spec import Knobs, ModelSpec, TrialConfig, canonical_params
from autotuner.storage.models import StudyStatus, TrialState
from autotuner.storage.session import Database
from autotuner.study import endgame, ending, finish, proposals, restore
from autotuner.study.budget import Budget
from autotuner.study.create import create_study
from autotuner.study.end_kept import KeptForEnd
from autotuner.study.events import Event, OnEvent
from autotuner.study.lifecycle import StudyLease, default_owner
from autotuner.study.lost import rerun_allowed
from autotuner.study.pause import Pause, WaitingForGpus, gpus_missing
from autotuner.study.trials import InFlight, TrialBook, lost_outcome, outcome, trial_config
from autotuner.types import Params, utcnow

__all__ = ["MAX_IDLE_PROPOSALS", "Event", "StudyRunner", "create_study", "default_owner"]

log = logging.getLogger(__name__)

# How many proposals in a row may be ruled out or repeat a measured config before we conclude
# the sampler has nothing new to offer (a small space fully explored).
MAX_IDLE_PROPOSALS = 200


class StudyRunner:
    """Drives one study to completion on an executor.

    Three optional hooks change what the search proposes without touching the policy (the
    replay benchmark uses them to search only the configs a sparse recording holds):

    - `seeds`: maps the policy's seed lists (the expert default, earlier winners, ... run
      first; the alternatives that wait for the throughput model, search/seeding.py), each
      on its own, to the params actually run in a new study.
    - `screen`: consulted before the policy's own screen for every new proposal (not for a
      retry); a `Prune` rules the proposal out, None passes it on to the policy.
    - `wrap_sampler`: wraps the Optuna sampler the study was configured with.
    """

    # Set when the study starts, by restore.py (from the study's rows).
    policy: SearchPolicy
    launched: int

    def __init__(
        self,
        db: Database,
        study_id: str,
        executor: Executor,
        *,
        owner: str | None = None,
        on_event: OnEvent | None = None,
        heartbeat_interval_s: float = 5.0,
        lease_ttl_s: float = 60.0,
        poll_s: float = 0.5,
        seeds: Callable[[list[Params]], list[Params]] | None = None,
        screen: Callable[[Params, Knobs], Prune | None] | None = None,
        wrap_sampler: Callable[[BaseSampler], BaseSampler] | None = None,
        candidates: Callable[[], list[Params]] | None = None,
        clock: Callable[[], dt.datetime] = utcnow,
    ) -> None:
        self.db = db
        self.study_id = study_id
        self.executor = executor
        self.owner = owner or default_owner()
        self.on_event = on_event or (lambda e: None)
        self.heartbeat_interval_s = heartbeat_interval_s
        self.lease_ttl_s = lease_ttl_s
        self.poll_s = poll_s
        self._seeds = seeds
        self._screen = screen
        self._wrap_sampler = wrap_sampler
        self._candidates = candidates
        self._clock = clock  # the time budget's "now" (study/budget.py)
        self.lease = StudyLease(
            db,
            study_id,
            self.owner,
            ttl_s=lease_ttl_s,
            heartbeat_interval_s=heartbeat_interval_s,
            on_event=self.on_event,
        )
        self.trials = TrialBook(db, study_id, executor, self.on_event, owner=self.owner)
        # What the end of the study reads and replays, kept up as trials end (study/end_kept.py).
        self.end_kept = KeptForEnd(db, study_id)
        # Why it launches nothing now (the cluster down, its GPUs gone), and for how long.
        self.pause = Pause(self._store_waiting)
        self.device_type: str | None = None  # what its trials run on: cuda or cpu
        self.retry_queue: list[tuple[Params, int]] = []  # (params, number retried)
        self.measured: dict[str, Observation] = {}  # canonical params -> what it gave
        # Every candidate config ever dispatched, failed ones too: the throughput model must
        # not propose again a config whose trial (and its retry) failed.
        self.attempted: set[str] = set()
        self._late: set[str] = set()  # proposals not launched: no time left for them
        self.done = False
        self._idle_proposals = 0
        # Configs to run next, in order (the seeds, a pruned seed's twin first). Kept here,
        # not in Optuna's waiting queue, and handed to Optuna one at a time just before its
        # ask: Optuna's ask pops the oldest waiting trial, so a retry enqueued behind queued
        # seeds got a seed's config, ran it unscreened as "the retry", and the failed config
        # never ran again.
        self._queue: list[Params] = []
        # Seeds that wait until the throughput model has no proposal (search/seeding.py).
        self._later_seeds: list[Params] = []
        self._seed_plan: SeedPlan | None = None  # the stored plan (None: a study from before it)
        self._carried: list[Carried] | None = None  # earlier studies' memory evidence, once read
        self._exhausted = False
        self._search_exhausted = False

    @property
    def in_flight(self) -> dict[str, InFlight]:
        """The dispatched trials whose results are not stored yet, by executor handle."""
        return self.trials.in_flight

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        """Take the lease, reconcile orphaned trials, rebuild the sampler from the database."""
        study = self.lease.take()
        self.space, self.model, self.objective = study.space, study.model, study.objective
        self.max_trials, self.max_minutes = study.max_trials, study.max_minutes
        self.gpus_per_trial, self.options = study.gpus_per_trial, study.options
        self.sampler_name, self.seed = study.sampler, study.seed
        if study.over:
            self.done = True
            return
        self.started_at, self.created_at = study.started_at, study.created_at
        # Waited before a restart: still not spent; a wait it stopped in goes on until the
        # first check says otherwise (and clears the stored reason then).
        self.pause.resume(study.waiting, study.paused_s)
        self.budget = Budget(
            self.max_trials, self.max_minutes, self.started_at, self._clock, self.pause.seconds
        )
        self.target = self.executor.target()
        if study.device_type == "cuda" and self.target.device_type != "cuda":
            # Its GPUs left (or are not back yet): wait, never plan or run it for the CPU.
            self.pause.update(gpus_missing("cuda", self.gpus_per_trial, self.target))
            raise WaitingForGpus(self.pause.reason or "")
        self.device_type = self.target.device_type
        if study.device_type != self.target.device_type:  # submitted without a target, or moved
            self.lease.record_device(self.target.device_type)
        too_big = self.target.device_type == "cuda" and self.gpus_per_trial > self.target.gpus_total
        if too_big or (self.target.device_type != "cuda" and self.gpus_per_trial > 1):
            # It could never be scheduled as asked (on the CPU a trial is one process): say so
            # and stop, rather than wait forever for GPUs or store a count it did not run.
            have = self.target.gpus_total if too_big else 0
            finish.fail(
                self,
                f"each trial asks for {self.gpus_per_trial} GPUs but the cluster has "
                f"{have}; resubmit with --gpus {max(have, 1)} "
                f"or fewer, or add GPU workers to the cluster",
            )
            return
        # The stored recommendation may be a trial behind (a crash after a result was stored).
        self.lease.store_live_best(self.objective, self.options)
        self.optuna = new_study(self.space, self.sampler_name, self.seed)
        if self._wrap_sampler is not None:
            self.optuna.sampler = self._wrap_sampler(self.optuna.sampler)
        self.distributions = distributions(self.space)
        restore.restore(self, study.seeds)

    def _policy(self, space: SearchSpace) -> SearchPolicy:
        policy = SearchPolicy(
            space=space,
            model=self.model,
            target=self.target,
            gpus_per_trial=self.gpus_per_trial,
            objective=self.objective,
            options=self.options,
        )
        policy.cost.carry(self._earlier_memory())
        return policy

    def _earlier_memory(self) -> list[Carried]:
        """Earlier studies' memory evidence for this model and GPU, read once: every policy
        of the study (a restart's too) starts from the same."""
        if self._carried is None:
            self._carried = earlier_memory(
                self.db,
                self.model,
                self.target,
                gpus_per_trial=self.gpus_per_trial,
                before=self.created_at,
                limit=self.options.memory_history if self.options.cost_model else 0,
            )
            if self._carried:
                self.on_event(Event("carried", message=carried_words(self._carried)))
        return self._carried

    # ------------------------------------------------------------------ loop

    def run(self, between_rounds: Callable[[], None] | None = None) -> None:
        """Run the study to its end. `between_rounds` is called before each round: it may
        raise to stop the run (the CLI's Ctrl-C, cli/signals.py)."""
        self.start()
        while not self.done:
            if between_rounds is not None:
                between_rounds()
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
            if self.done:  # a result that ends the study (study/ending.py)
                return 0
        if self.lease.cancel_requested():
            self.trials.cancel_all()
            finish.finish(self, StudyStatus.CANCELLED)
            return 0
        # The cluster down or the GPUs gone: launch nothing, say why (study/pause.py).
        self.pause.check(self.executor, self.device_type, self.gpus_per_trial)
        launched = self.launch(max_launches)
        self.lease.keep_alive([f.trial_id for f in self.in_flight.values()])
        if not self.in_flight and (finish.budget_spent(self) or self._exhausted):
            finish.finish(self, StudyStatus.COMPLETED)
        return launched

    def launch(self, max_count: int | None = None) -> int:
        """Dispatch up to max_count new trials while the budget and the executor allow."""
        if self.pause.reason is not None:
            return 0
        launched = 0
        for flight in self.trials.reconcile():  # a failed dispatch's row, submitted now
            if flight.retry_of is None:
                self.launched += 1
            else:  # the retry was put back in the queue when its dispatch raised: it is done
                self.retry_queue = [r for r in self.retry_queue if r[1] != flight.retry_of]
            kind = "retry" if flight.retry_of is not None else "launched"
            self.on_event(Event(kind, flight.number, flight.params, TrialState.RUNNING))
            launched += 1
        while (max_count is None or launched < max_count) and not self.done:
            if finish.budget_spent(self) or self.executor.free_slots(self.gpus_per_trial) <= 0:
                break
            if not self._launch_next():
                break
            launched += 1
        return launched

    @property
    def wants_trials(self) -> bool:
        """Whether this runner would launch a trial if it had a free slot."""
        if self.done or self.pause.reason is not None:
            return False
        return not self._exhausted and not finish.budget_spent(self)

    # ------------------------------------------------------------------ launching

    def _launch_next(self) -> bool:
        """Dispatch one new trial; False when the sampler has nothing new to offer."""
        if not self.retry_queue and finish.search_over(self):
            return self._launch_end_phase()
        if not self.retry_queue and proposals.launch_proxy(self):
            return True
        while self._idle_proposals < MAX_IDLE_PROPOSALS:
            retry_of = None
            retry = self.retry_queue.pop(0) if self.retry_queue else None
            if retry is not None:
                params, retry_of = retry
                self.optuna.enqueue_trial(params, skip_if_exists=False)
            else:
                proposals.enqueue_next(self)
                if grid_exhausted(self.optuna):
                    break  # every grid point proposed and finished: the search is over
            ask = self.optuna.ask(self.distributions)
            params = dict(ask.params)
            key = canonical_params(params)
            knobs = self.space.knobs_for(params, self.model, self.gpus_per_trial)
            if retry_of is None and key in self.measured:
                tell(self.optuna, ask, self.measured[key])  # a repeat: no GPU time spent
                self._idle_proposals += 1
                continue
            if retry_of is None and (key in self.attempted or key in self._late):
                # Run before and failed (its one retry is the retry queue's), or running now:
                # samplers ignore failed trials and would propose it again and again.
                self.optuna.tell(ask, state=OptunaState.FAIL)
                self._idle_proposals += 1
                continue
            prune = self._screen_proposal(params, knobs) if retry_of is None else None
            if prune is not None:
                # The same config without what made it redundant (an unneeded allocator mode)
                # runs in its place, with its purpose (a seed's, the expert default's).
                twin = prune.instead
                if twin is not None and canonical_params(twin) in proposals.taken(self):
                    twin = None
                if twin is not None:
                    restore.seed_in_place(self, params, twin)  # before the pruned row: see there
                self._record_pruned(ask, params, knobs, prune)
                self._idle_proposals += 1
                if twin is not None:
                    self.policy.inherit_purpose(twin, params)
                    self._queue.insert(0, twin)
                continue
            if self._too_late(knobs):
                # Not a property of the config (no row, nothing infeasible told): it does not
                # fit in the time left; a cheaper proposal may. A retry is held to the same
                # clock: its failed trial stays the config's answer. A timed-out max-autotune
                # compile retried at 8.5 min of a 10-minute replayed GPT-2 study ran it to
                # 12.5 (bench/results/replay_minutes_h200).
                if retry_of is None:
                    self._late.add(key)
                self.optuna.tell(ask, state=OptunaState.FAIL)
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
        return self._launch_end_phase()

    def _launch_end_phase(self) -> bool:
        """The next re-measurement or end check; an end check shows in the recommendation at
        once (e.g. 'the headroom check is running'), so the stored one is refreshed."""
        launched = endgame.launch_remeasure(self)
        if launched:
            self.lease.store_live_best(self.objective, self.options)
        return launched

    def _too_late(self, knobs: Knobs) -> bool:
        why = self.policy.time_plan.too_late(knobs, self.max_trials, self.budget.time_left())
        if why is not None and self.policy.time_plan.late == 1:
            self.on_event(Event("search_over", message=f"not launched for time: a {why}"))
        return why is not None

    def _screen_proposal(self, params: Params, knobs: Knobs) -> Prune | None:
        prune = self._screen(params, knobs) if self._screen is not None else None
        return prune if prune is not None else self.policy.screen(params, knobs)

    def _record_pruned(self, ask: optuna.Trial, params: Params, knobs: Knobs, prune: Prune) -> None:
        number = self.trials.record_pruned(
            params, self._config(knobs, None), prune, self.policy.purpose(params)
        )
        obs = Observation(params, 0.0, prune.violation)
        tell(self.optuna, ask, obs)
        self.measured[canonical_params(params)] = obs
        self.on_event(Event("pruned", number, params, TrialState.PRUNED, message=prune.message))

    def _config(
        self,
        knobs: Knobs,
        number: int | None,
        model: ModelSpec | None = None,
        abandon_below: float | None = None,
    ) -> TrialConfig:
        return trial_config(
            self.study_id,
            model or self.model,
            self.space,
            self.target,
            self.gpus_per_trial,
            knobs,
            number,
            abandon_below=abandon_below,
            attention_probe=self.policy.attention_probe(knobs),
        )

    def _dispatch(
        self,
        ask: optuna.Trial | None,
        params: Params,
        knobs: Knobs,
        retry_of: int | None,
        purpose: str | None = None,
        model: ModelSpec | None = None,
    ) -> None:
        purpose = purpose or self.policy.purpose(params)
        # Only a search trial may stop early: seeds are the comparison, end checks run in full.
        floor = self.policy.abandon_floor() if purpose == Purpose.SEARCH else None
        # A search trial (or seed) may compile only while the study has time for it; an end
        # check runs to its end.
        budget = (
            self.policy.time_plan.compile_budget_s(self.max_trials, self.budget.time_left())
            if purpose in SEARCH_TRIALS
            else None
        )

        def config_for(number: int) -> TrialConfig:
            config = self._config(knobs, number, model, floor)
            tighter = config.measure.compile_budget_s  # the space's own, if it is tighter
            if budget is None or (tighter is not None and tighter <= budget):
                return config
            measure = config.measure.model_copy(update={"compile_budget_s": budget})
            return config.model_copy(update={"measure": measure})

        flight = self.trials.dispatch(ask, params, config_for, retry_of=retry_of, purpose=purpose)
        if retry_of is None:
            self.launched += 1
        if purpose not in END_CHECKS:
            self.attempted.add(canonical_params(params))
        kind = "retry" if retry_of is not None else "launched"
        self.on_event(Event(kind, flight.number, params, TrialState.RUNNING))

    # ------------------------------------------------------------------ recording

    def _record(self, completed: Completed) -> None:
        flight = self.in_flight.get(completed.handle)
        if flight is None:
            return  # cancelled earlier; its late result is discarded
        result = completed.result
        reference = flight.purpose == Purpose.REFERENCE  # one GPU, outside the study's space
        gpus = 1 if reference else self.gpus_per_trial
        out = outcome(flight, result, self.policy, self.objective, gpus, self.options)
        lost = completed.lost and rerun_allowed(flight.purpose)
        if lost:  # the cluster failed under it: nothing about the config (study/lost.py)
            out = lost_outcome(flight, result, self.trials.lost_streak(flight))
        elif flight.purpose in (Purpose.PARITY, Purpose.PARITY_REFERENCE):
            out = endgame.parity_outcome(self, flight, result, out)
        elif flight.purpose == Purpose.HEADROOM:
            out = endgame.headroom_outcome(out)
            if result.loss_curve:  # it ran the numerics check's candidate steps too
                out = endgame.parity_outcome(self, flight, result, out)
        self.trials.finish(
            flight,
            out.state,
            None if lost else result,  # a loss's wall and message are the cluster's
            out.error_class,
            out.message,
            out.value,
            completed.worker,
            retried=out.retry,
        )
        # Only once the result is stored: a failed write leaves the trial in flight, to be
        # recorded by a later call with the same result.
        del self.in_flight[completed.handle]
        stop = ending.stop_reason(flight.number, result, self.space)
        if stop is not None:
            # No other config would escape it: nothing to learn, retry or launch.
            self.trials.cancel_all()
            finish.fail(self, stop)
            return
        if out.retry:
            self.retry_queue.append((flight.params, flight.number))
        if not lost:
            self.policy.observe(flight.number, flight.params, result, flight.purpose)
        if flight.ask is not None:
            tell(self.optuna, flight.ask, out.observation)
        if out.observation.value is not None and flight.purpose not in END_CHECKS:
            self.measured[canonical_params(flight.params)] = out.observation
        if out.state == TrialState.COMPLETE or flight.purpose in END_CHECKS:
            # Only these can change the recommendation; readers get it from the study row.
            self.lease.store_live_best(self.objective, self.options)
        self.end_kept.catch_up(self.policy)

    # ------------------------------------------------------------------ budget and the end

    def _store_waiting(self, reason: str | None, paused_s: float) -> None:
        self.lease.set_waiting(reason, paused_s)
        self.on_event(Event("waiting" if reason else "resumed", message=reason))

    def interrupt(self, why: str) -> None:
        """Stop for now (Ctrl-C, SIGTERM, a service's drain): cancel the trials in flight,
        store them and the study as interrupted, give the lease back (`autotuner resume`
        continues it: its trials, budget left and seeds are all in its rows)."""
        self._cancel_in_flight()
        self.lease.interrupt(why)
        self.done = True
        self.on_event(Event("done", state=StudyStatus.INTERRUPTED, message=why))

    def _cancel_in_flight(self) -> None:
        for handle in list(self.in_flight):
            try:
                self.executor.cancel(handle)
            except Exception:  # the cluster may be gone too: the rows are what resume reads
                log.warning("study %s: could not cancel %s", self.study_id, handle)
        self.in_flight.clear()

    def hand_over(self) -> None:
        """Stop here and leave the study to the next coordinator (a service that exits to be
        restarted): cancel the trials in flight, store them lost (run again, no retry spent)
        and the wait so far, give the lease back; the study stays running."""
        self._cancel_in_flight()
        self.lease.hand_over(self.pause.reason, self.pause.seconds())
        self.done = True
