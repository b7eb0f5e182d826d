"""The search policy: what the coordinator asks besides Optuna, so no GPU time is wasted.

`StudyRunner` (autotuner/study/coordinator.py) owns the state machine, the database and the
sampler; this class owns the judgement, one study at a time, and composes one part per job:

- **screen** a proposal before launch (`screen.py`): rules, learned rules, the OOM boundary,
  the cost model's predicted OOM, dominated checkpointing;
- **learn** from each finished trial: calibrate the cost model (`costmodel/`), teach the screen
  what failed, track the best value and the noise (`progress.py`), and tell the sampler how
  infeasible a trial was (`feedback.py`);
- **seed** a new study (`seeding.py`): the expert default (after its fastest alternative where
  the prior expects that one clearly faster), then earlier winners on the same GPU and model
  family, then the expert's closest alternatives;
- **finish** (`remeasure.py`): stop once no trial has improved beyond noise for `patience`
  trials or the budget is spent, then re-measure the top candidates, interleaved A B A B;
  with a time budget, `time_plan.py` stops the search in time for the end checks, leaves out
  proposals too late to run, and cuts the re-measurements or the checks that would not fit;
- **report** the evidence for the recommendation (`evidence.py`).

Options: `autotuner.options.StudyOptions` (one typed model; its defaults live there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from autotuner.executors.base import Target
from autotuner.options import StudyOptions
from autotuner.purpose import END_CHECKS, SEARCH_TRIALS, Purpose
from autotuner.search import evidence
from autotuner.search.context import SearchContext
from autotuner.search.costmodel import CostModel
from autotuner.search.costmodel.throughput import ThroughputModel
from autotuner.search.early_stop import abandon_floor
from autotuner.search.end_time import (
    DueCheck,
    TimeLeft,
    TrialWalls,
)
from autotuner.search.evidence_replay import Replay
from autotuner.search.feedback import Feedback
from autotuner.search.micro_batch_up import MicroBatchUp, leaders
from autotuner.search.numerics import (
    cold_reference,
    parity_reference_knobs,
    space_changes_numerics,
    warm_reference,
    with_recompute,
)
from autotuner.search.objective import Objective, memory_violation
from autotuner.search.progress import Progress
from autotuner.search.proposer import Proposer
from autotuner.search.remeasure import Remeasure, stop_reason
from autotuner.search.sampler import Observation
from autotuner.search.screen import DOMINATED, Z_PRUNE, Prune, Screen
from autotuner.search.seeding import Seeder, SeedPlan
from autotuner.search.space import SearchSpace
from autotuner.search.time_plan import TimePlan
from autotuner.search.trial_cost import TrialCosts
from autotuner.spec import (
    Checkpointing,
    Knobs,
    ModelFamily,
    ModelSpec,
    TrialResult,
    TrialStatus,
    canonical_params,
)
from autotuner.storage.models import Trial, TrialState
from autotuner.storage.session import Database
from autotuner.types import Params

# Prune, Z_PRUNE and DOMINATED live in screen.py; importable from here for older callers.
__all__ = ["DOMINATED", "Z_PRUNE", "Prune", "SearchPolicy"]


# An 8-bit candidate's reference keeps its checkpointing where the memory model is this sure
# it fits (mean + z sd), else recomputes every block.
REFERENCE_FIT_Z = 1.0


class SearchPolicy:
    """The judgement of one study: screen, learn, seed, finish and report."""

    def __init__(
        self,
        *,
        space: SearchSpace,
        model: ModelSpec,
        target: Target,
        gpus_per_trial: int,
        objective: Objective,
        options: StudyOptions,
    ) -> None:
        self.space, self.model, self.target = space, model, target
        self.gpus = gpus_per_trial
        self.objective = objective
        self.options = options
        self.on_cuda = target.device_type != "cpu"
        limits = [x for x in (space.measure.memory_limit_gib, target.memory_gib) if x]
        self.limit_gib = min(limits) if limits else None
        self.cost = CostModel(
            model, num_gpus=max(gpus_per_trial, 1), on_cuda=self.on_cuda, limit_gib=self.limit_gib
        )
        self.context = SearchContext(space, model, target, gpus_per_trial, options, self.cost)
        self.screening = Screen(self.context)
        self.learned = self.screening.learned
        self.progress = Progress(objective=objective, gpus=gpus_per_trial, options=options)
        self.remeasure = Remeasure(
            top=options.remeasure_top,
            rounds=options.remeasure_rounds,
            reference=gpus_per_trial > 1,
            parity=options.numerics_check and space_changes_numerics(space, target),
            headroom=options.headroom > 0 and options.headroom_check,
        )
        self.feedback = Feedback(cost=self.cost, options=options, knobs=self.knobs)
        # What each config's trial took: the end checks' time (end_time.py).
        self.walls = TrialWalls(recomputes=self._recomputes)
        self.costs = TrialCosts(model.n_layer)  # what a proposal's trial is expected to take
        # When a timed study's search stops, and what it cuts, for its end (time_plan.py).
        self.time_plan = TimePlan(
            progress=self.progress,
            remeasure=self.remeasure,
            walls=self.walls,
            costs=self.costs,
            knobs=self.knobs,
            as_run=self._as_run,
        )
        # Each seed's purpose by its canonical params: the expert default or a seed (`purpose`).
        self.seed_roles: dict[str, str] = {}
        self.throughput = ThroughputModel(model, target, max(gpus_per_trial, 1))
        self.proposer: Proposer | None = None
        # The leaders' next micro-batch up where their measured peaks leave room
        # (micro_batch_up.py); it needs the memory model, as the cost model's pruning does.
        self.micro_batch_up = (
            MicroBatchUp(
                space=space,
                model=model,
                gpus=gpus_per_trial,
                cost=self.cost,
                limit_gib=self.limit_gib,
                headroom=options.headroom,
            )
            if options.cost_model
            else None
        )
        self._proposal_screen: Callable[[Params, Knobs], object | None] = self.screen
        self._leaders: tuple[tuple[int, int, float], list[Params]] | None = None
        self._incumbent: tuple[float, Params] | None = None  # best measured tokens/s, params
        self._kinds_seen: set[tuple[str, ...]] = set()  # measured, at any depth, or in flight
        self._kernels_ran: set[tuple[str, str]] = set()  # (attention, its dtype) that ran here
        self._compiled: list[Knobs] = []  # what finished search trials ran: the compile cache's

    def enable_proposals(
        self,
        *,
        seed: int,
        screen: Callable[[Params, Knobs], object | None] | None = None,
        candidates: Callable[[], list[Params]] | None = None,
    ) -> None:
        """Let `suggest` propose by the throughput model (options.guided). `screen`: the
        caller's whole screen (default: the policy's); `candidates` replaces the space as the
        pool (the replay benchmark's recorded configs)."""
        self._proposal_screen = screen or self.screen
        if self.options.guided:
            self.proposer = Proposer(
                space=self.space,
                model=self.model,
                gpus=self.gpus,
                throughput=self.throughput,
                memory=self.cost,
                screen=screen or self.screen,
                costs=self.costs,
                # As the screen: a GPU's memory only (on the CPU the peak is reported, not held).
                headroom=self.options.headroom if self.on_cuda else 0.0,
                seed=seed,
                candidates=candidates,
            )

    # ------------------------------------------------------------------ proxies

    def proxy_model(self) -> ModelSpec | None:
        """The shallower model proxy trials run (options.proxy_layers layers, same width), or
        None: proxies off, a family whose depth cannot be changed here (a Hugging Face config
        or a user factory), or a model not deeper than twice the proxy."""
        layers = self.options.proxy_layers
        if layers is None or self.model.family not in (ModelFamily.GPT2, ModelFamily.LLAMA):
            return None
        if self.model.n_layer < 2 * layers:
            return None
        return self.model.model_copy(update={"n_layer": layers})

    def proxy_for(self, params: Params) -> ModelSpec | None:
        """The proxy model to run these params on first, when their kind (the knobs the
        throughput model's efficiencies hang on) was never measured at any depth; None: run
        them at full depth. Marks the kind as taken, so one proxy teaches it."""
        proxy = self.proxy_model()
        if proxy is None:
            return None
        kind = _kind(self.knobs(params))
        if kind in self._kinds_seen:
            return None
        self._kinds_seen.add(kind)
        return proxy

    def suggest(self, exclude: set[str], pending: Sequence[Params] = ()) -> Params | None:
        """The next config the policy proposes (None: leave it to the sampler): a leader's
        next micro-batch up where its measured peak leaves room (micro_batch_up.py), else the
        throughput model's; `pending`: the configs running now, whose kinds the model's
        proposal avoids where it can (proposer.py)."""
        up = self.next_micro_batch_up(exclude)
        if up is not None:
            return up
        if self.proposer is None:
            return None
        best = self._incumbent
        return self.proposer.suggest(
            exclude=exclude,
            incumbent=best[1] if best else None,
            best_tokens_per_s=best[0] if best else None,
            pending=pending,
        )

    def next_micro_batch_up(self, exclude: set[str]) -> Params | None:
        """The next micro-batch up of a config within the noise of the best, where its
        measured peak leaves room for it (micro_batch_up.py); its trials are marked seeds: the
        local search an engineer does by hand, as the expert's alternatives are."""
        if self.micro_batch_up is None:
            return None
        # The leaders change only with a finished search trial: read once per trial, not once
        # per proposal (a 10,000-trial study asks after each).
        progress = self.progress
        key = (progress.search_trials, len(progress.values), progress.noise_rel())
        if self._leaders is None or self._leaders[0] != key:
            self._leaders = (key, leaders(progress.values, key[2]))
        up = self.micro_batch_up.next(
            exclude=exclude, leaders=self._leaders[1], screen=self._proposal_screen
        )
        if up is not None:
            self.seed_roles.setdefault(canonical_params(up), Purpose.SEED)
        return up

    def knobs(self, params: dict[str, Any]) -> Knobs:
        return self.space.knobs_for(params, self.model, self.gpus)

    def _recomputes(self, params: dict[str, Any]) -> bool:
        """Whether the config checkpoints activations (end_time.RECOMPUTE_WARM_SHARE)."""
        return self.knobs(params).checkpointing != Checkpointing.NONE

    def attention_probe(self, knobs: Knobs) -> bool:
        """Whether a trial of these knobs should probe its attention kernel before building
        (MeasureSettings.attention_probe): not where one of this study's trials already ran
        that kernel at that dtype (the model's head shape is the study's)."""
        return _attention_kernel(knobs) not in self._kernels_ran

    def abandon_floor(self) -> float | None:
        """The tokens/s below which a search trial stops after its first repeat
        (search/early_stop.py): far below the incumbent, beyond the study's noise."""
        if not self.options.stop_slow_trials:
            return None
        best = self._incumbent[0] if self._incumbent else None
        return abandon_floor(self.objective, best, self.progress.noise_rel())

    def screen(self, params: dict[str, Any], knobs: Knobs) -> Prune | None:
        """Why not to launch this proposal, or None to launch it."""
        return self.screening.check(params, knobs)

    # ------------------------------------------------------------------ learning

    def observe(
        self,
        number: int,
        params: dict[str, Any],
        result: TrialResult | None,
        purpose: str,
        knobs: Knobs | None = None,
        *,
        fit: bool = True,
    ) -> None:
        """Learn from a finished trial (live, or replayed from the database on restart); its
        knobs as it ran them when known (a stored trial's config), else rebuilt from params."""
        if result is None or "predicted" in result.notes:
            return
        if result.status == TrialStatus.OK:  # its attention kernel ran: no probe needed again
            self._kernels_ran.add(_attention_kernel(knobs or self.knobs(params)))
        if purpose == Purpose.PROXY:
            self._observe_proxy(params, result, fit=fit)
            return
        if purpose in END_CHECKS:  # one GPU, or a parity run: nothing about the search's configs
            self.progress.observe(params, result, purpose)
            self.walls.observe(params, result, purpose)  # a headroom check's warm compile
            return
        knobs = knobs or self.knobs(params)
        if purpose in SEARCH_TRIALS and result.status == TrialStatus.OK:
            self._compiled.append(knobs)
        self.walls.observe(params, result, purpose, knobs.grad_accum)
        self._kinds_seen.add(_kind(knobs))
        self.cost.observe(knobs, result, fit=fit)
        self.throughput.observe(knobs, result, fit=fit)
        self.costs.observe(knobs, result)
        over_ceiling = memory_violation(result, self.options) > 0
        tokens_per_s = None if over_ceiling else result.tokens_per_s
        if tokens_per_s and (self._incumbent is None or tokens_per_s > self._incumbent[0]):
            searched = {k: params[k] for k in self.space.knobs if k in params}
            self._incumbent = (tokens_per_s, searched)
        self.screening.learn(number, params, knobs, result)
        self.progress.observe(params, result, purpose)
        if self.micro_batch_up is not None and purpose in SEARCH_TRIALS:
            self.micro_batch_up.observe(params, knobs, result)

    def _observe_proxy(self, params: Params, result: TrialResult, *, fit: bool = True) -> None:
        """A proxy teaches the throughput and memory models, with its own (shallower) model's
        terms; it is no candidate and says nothing about the search's progress."""
        proxy = self.proxy_model()
        if proxy is None:  # the options changed since it ran: its depth is unknown here
            return
        knobs = self.space.knobs_for(params, proxy, self.gpus)
        self._kinds_seen.add(_kind(knobs))
        self.cost.observe(knobs, result, model=proxy, fit=fit)
        self.throughput.observe(knobs, result, model=proxy, fit=fit)

    def observe_row(self, t: Trial, *, fit: bool = True) -> None:
        """`observe` for a trial row read back from the database; fit=False only records it
        (a restart replays every row, then calls `refit` once)."""
        if t.state == TrialState.PRUNED or not t.result:
            return
        result = TrialResult.model_validate(t.result)
        self.observe(t.number, t.params, result, t.purpose, t.knobs, fit=fit)

    def refit(self) -> None:
        """Fit the memory and throughput models to everything recorded so far."""
        self.cost.calibration.refit()
        self.throughput.refit()

    def observation(self, t: Trial) -> Observation | None:
        """What the sampler is told about a recorded trial (rebuilding after a restart)."""
        return self.feedback.observation(t)

    def violation(self, params: dict[str, Any], result: TrialResult) -> float:
        """The constraint value told to the sampler for a finished trial (0: feasible)."""
        return self.feedback.violation(params, result)

    # ------------------------------------------------------------------ seeding

    def seeds(self, db: Database) -> list[dict[str, Any]]:
        """Every seed (seeding.py), in order: the expert default, earlier winners on this GPU
        and model family, then the expert's closest alternatives."""
        return self.seed_plan(db).all

    def seed_plan(self, db: Database, *, timed: bool = False) -> SeedPlan:
        """The seeds to run first, and those that wait for the throughput model to run out of
        proposals (seeding.SeedPlan); without proposals (options.guided off) every one first.
        `timed`: the study has a time budget (the expert default then always runs first)."""
        plan = self._seeder().plan(db, timed=timed)
        if self.proposer is None:
            plan = SeedPlan(plan.all, expert=plan.expert)
        self.mark_seeds(plan.all, plan.expert)
        return plan

    def mark_seeds(self, seeds: list[dict[str, Any]], expert: dict[str, Any] | None) -> None:
        """Label these configs' trials as seeds, `expert`'s as the expert default (`purpose`);
        again after a caller maps the seeds to other configs (the replays' recorded ones)."""
        self.seed_roles = {canonical_params(p): Purpose.SEED for p in seeds}
        if expert is not None:
            self.seed_roles[canonical_params(expert)] = Purpose.EXPERT_DEFAULT

    def inherit_purpose(self, twin: dict[str, Any], of: dict[str, Any]) -> None:
        """`twin` runs in `of`'s place (a pruned seed's default-allocator twin): the same role,
        so an expert default pruned for an unneeded allocator mode is still the yardstick."""
        role = self.seed_roles.get(canonical_params(of))
        if role is not None:
            self.seed_roles[canonical_params(twin)] = role

    def restore_purposes(self, trials: Sequence[Any]) -> None:
        """A restarted coordinator's seeds: the roles its trials were stored with (over the
        stored plan's), so a retry of a seed (the expert default's first of all) keeps its
        role."""
        for t in trials:
            if t.purpose in (Purpose.EXPERT_DEFAULT, Purpose.SEED):
                self.seed_roles[canonical_params(t.params)] = t.purpose

    def expert_params(self) -> dict[str, Any]:
        return self._seeder().expert_params()

    def expert_fits(self, params: dict[str, Any]) -> bool:
        return self._seeder().expert_fits(params)

    def _seeder(self) -> Seeder:
        return Seeder(
            self.context,
            limit_gib=self.limit_gib,
            screen=self.screen,
            predicted_speed=lambda knobs: self.throughput.predict(knobs).tokens_per_s,
        )

    def purpose(self, params: dict[str, Any]) -> str:
        """A trial's stored purpose: the expert default, a seed or a search proposal."""
        return self.seed_roles.get(canonical_params(params), Purpose.SEARCH)

    # ------------------------------------------------------------------ finishing (time_plan.py)

    def too_late(self, knobs: Knobs, max_trials: int | None, time: TimeLeft | None) -> str | None:
        return self.time_plan.too_late(knobs, max_trials, time)

    @property
    def late(self) -> int:
        return self.time_plan.late

    @property
    def late_note(self) -> str | None:
        return self.time_plan.late_note

    def _checks_due(self, max_trials: int | None) -> list[DueCheck]:
        return self.time_plan.checks_due(max_trials)

    def reference_knobs(self, knobs: Knobs) -> Knobs | None:
        """What the numerics check's reference of a candidate with these knobs runs: its knobs
        at the reference precision (and fp32 moments, every block recomputed where those would
        not fit: the memory model, with no headroom, as a parity run keeps none), on a graph
        the study already compiled where one differs in nothing else. None where neither bf16
        nor fp32 runs here."""
        ref = parity_reference_knobs(knobs, self.target, self.model)
        if ref is None:
            return None
        # fp32 moments, or the unfused loss's logits, need memory the candidate did not.
        more = (ref.optimizer, ref.kernels) != (knobs.optimizer, knobs.kernels)
        if more and self.limit_gib is not None:
            # A parity run steps one micro-batch at a time (study/endgame.py).
            one = ref.model_copy(update={"grad_accum": 1})
            if not self.cost.predict(one, self.limit_gib).surely_fits(REFERENCE_FIT_Z):
                ref = with_recompute(ref)
        return warm_reference(ref, self._compiled, lambda k: cold_reference(k, self.model))

    def _as_run(self, purpose: str, params: dict[str, Any]) -> dict[str, Any]:
        """The params a check runs: the numerics check's reference runs the candidate's knobs
        at the reference precision (`reference_knobs`), so it takes what that config's trial
        took (the Llama 3B study of 2026-12-03 expected its bf16 reference to take the fp8
        candidate's cold compile: 86 s, where it ran in 44), warm where it borrows a compiled
        graph."""
        if purpose != Purpose.PARITY_REFERENCE:
            return params
        ref = self.reference_knobs(self.knobs(params))
        if ref is None:
            return params
        ran = ref.model_dump(mode="json")
        return {k: ran.get(k, v) for k, v in params.items()}

    def stop_reason(self, budget_spent: bool) -> str:
        """Why the search stopped, and why re-measuring did, if it was cut short."""
        plan = self.time_plan
        reason = plan.time_stop or stop_reason(self.progress, budget_spent)
        if plan.late and reason == "search space exhausted":
            # The proposals ran out because none fitted in the time left, not the space.
            reason = "no proposal fitted in the time left"
        notes = [n for n in (plan.late_note, plan.remeasure_note, plan.checks_note) if n]
        return "; ".join([reason, *notes])

    def report(self, trials: list[Trial], replay: Replay | None = None) -> dict[str, Any]:
        """Evidence for the recommendation: cost-model accuracy, learned rules, pruning counts.
        `replay`: this policy's `replay()`, fed the study's first trials as they ended."""
        return evidence.report(
            trials,
            model=self.model,
            knobs=self.knobs,
            cost=self.cost,
            throughput=self.throughput,
            learned=self.learned,
            replay=replay,
        )

    def replay(self) -> Replay:
        """The models' replay for `report`, to be fed the study's trials as they end."""
        return Replay(
            model=self.model, knobs=self.knobs, cost=self.cost, throughput=self.throughput
        )


def _attention_kernel(knobs: Knobs) -> tuple[str, str]:
    """The attention kernel and the dtype it runs in: fp8 trials attend in bf16 (only their
    Linear layers are float8), tf32 and fp32 in fp32."""
    precision = knobs.precision
    dtype = "bf16" if precision.is_fp8 else precision.value if precision.is_half else "fp32"
    return knobs.attention.value, dtype


def _kind(knobs: Knobs) -> tuple[str, ...]:
    """What the throughput model's efficiencies hang on (not micro-batch, accumulation,
    optimizer or padding, which its physics scales)."""
    return (
        knobs.precision.value,
        knobs.compile_mode.value,
        knobs.compile_scope.value,
        knobs.attention.value,
        knobs.checkpointing.value,
        knobs.kernels.value,
    )
