"""A study's seed plan at start: planned and stored on its first start, rebuilt on a restart.

`restore` runs once the runner has its sampler: it fixes the expert default's global batch
where the space asks for it, builds the search policy, replays the stored trials into the
sampler and the runner's counts, and queues the seeds that have not run. The plan is kept on
the study row, so a restarted coordinator queues what is left of the same plan (planned again
later it would differ: the history and the cost model moved on). `seed_in_place` keeps that
stored plan right when a pruned seed's twin takes its place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any, Protocol

from optuna import Study

from autotuner.search.policy import Prune, SearchPolicy
from autotuner.search.sampler import Observation, replay
from autotuner.search.seeding import SeedPlan
from autotuner.search.space import SearchSpace
from autotuner.spec import Knobs, ModelSpec, canonical_params
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.lifecycle import StudyLease
from autotuner.study.trials import history
from autotuner.types import Params


class Runner(Protocol):
    """What restoring a study reads and sets on its runner (coordinator.StudyRunner)."""

    db: Database
    study_id: str
    space: SearchSpace
    model: ModelSpec
    gpus_per_trial: int
    max_minutes: float | None
    seed: int
    lease: StudyLease
    optuna: Study
    policy: SearchPolicy
    launched: int
    measured: dict[str, Observation]
    attempted: set[str]
    retry_queue: list[tuple[Params, int]]
    _seeds: Callable[[list[Params]], list[Params]] | None
    _candidates: Callable[[], list[Params]] | None
    _queue: list[Params]
    _later_seeds: list[Params]
    _seed_plan: SeedPlan | None

    def _policy(self, space: SearchSpace) -> SearchPolicy: ...

    def _screen_proposal(self, params: Params, knobs: Knobs) -> Prune | None: ...


def restore(runner: Runner, stored: dict[str, Any] | None) -> None:
    """The policy, the sampler's history and the seeds to run, from the study's rows;
    `stored` is the study row's seed plan (None: none planned yet, or a study from before
    plans were stored)."""
    # Rules, cost model, seeding, re-measurement and early stop (search/policy.py).
    if runner.space.global_batch_from_expert and not runner.space.global_batch_tokens:
        hold_expert_global_batch(runner, runner.space.global_batch_from_expert)
    runner.policy = runner._policy(runner.space)
    runner.policy.enable_proposals(
        seed=runner.seed, screen=runner._screen_proposal, candidates=runner._candidates
    )
    rebuild(runner, SeedPlan(**stored) if stored is not None else None)


def hold_expert_global_batch(runner: Runner, accum: int) -> None:
    """The space holds the expert default's global batch: its micro-batch (the cost model's
    choice for this model and GPU) x `accum` steps x seq_len x GPUs, fixed now that the
    target is known, and stored, so every trial of the study (a restart's too) runs it."""
    # The expert default as it will run: with its accumulation steps. Accumulating keeps
    # every fp32 gradient alive across micro-steps (4 B/param: 30 GiB for Llama 8B, which
    # with the weights and AdamW's moments leaves no room on one H200); where no expert
    # config fits that way but one fits without accumulating, that one sets the batch.
    space = runner.space
    for steps in dict.fromkeys((accum, 1)):
        as_run = space.model_copy(update={"fixed": {**space.fixed, "grad_accum": steps}})
        policy = runner._policy(as_run)
        expert = policy.expert_params()
        if policy.expert_fits(expert):
            break
    held = space.expert_global_batch(policy.knobs(expert), runner.model, runner.gpus_per_trial)
    runner.space = space.model_copy(update={"global_batch_tokens": held})
    runner.lease.hold_space(runner.space)


def rebuild(runner: Runner, stored: SeedPlan | None) -> None:
    """The sampler, the counts and the retries from the stored trials; the seeds still to
    run from `stored`, the plan the study row keeps (planned and stored now if none ran)."""
    with runner.db.session() as s:
        trials = TrialRepo(s).list(runner.study_id)
        past = history(trials, runner.policy)
        replay(runner.optuna, runner.space, past.observations)
    runner.launched = past.launched
    runner.measured.update(past.measured)
    runner.attempted |= past.attempted
    runner.retry_queue.extend(past.retries)
    seeds = stored
    if not trials:
        # The expert default first (after its alternative where the prior expects that one
        # clearly faster), so the study starts from a good config; then earlier
        # winners on this GPU and model family, and the expert's alternatives that do not
        # wait for the throughput model (search/seeding.py).
        plan = runner.policy.seed_plan(runner.db, timed=runner.max_minutes is not None)
        seeds = plan
        mapping = runner._seeds
        if mapping is not None:  # each part mapped on its own (a part may be empty)
            now, later = (mapping(part) if part else [] for part in (plan.now, plan.later))
            seeds = SeedPlan(now, later, expert=_mapped_expert(mapping, plan, now))
        # Stored, so a restart queues what has not run (the plan would differ by then).
        runner.lease.hold_seeds(asdict(seeds))
    runner._seed_plan = seeds  # as stored: a pruned seed's twin replaces it (seed_in_place)
    if seeds is not None:
        runner.policy.mark_seeds(seeds.all, seeds.expert)

        def not_run(part: list[Params]) -> list[Params]:
            return [p for p in part if canonical_params(p) not in runner.attempted]

        runner._queue, runner._later_seeds = not_run(seeds.now), not_run(seeds.later)
    # What the trials were stored as wins (a study from before the stored plan has none).
    runner.policy.restore_purposes(trials)


def seed_in_place(runner: Runner, seed: Params, twin: Params) -> None:
    """Store the seed plan with `twin` in `seed`'s place, where `seed` is one of it. The
    pruned row makes `seed` attempted, so a coordinator restarted after it would drop the
    seed from its queue and, with the old plan, never run the twin: the expert default
    could be lost so. Stored before that row: a restart between the two runs the twin."""
    plan = runner._seed_plan
    if plan is None or canonical_params(seed) not in {canonical_params(p) for p in plan.all}:
        return
    runner._seed_plan = plan.replaced(seed, twin)
    runner.lease.hold_seeds(asdict(runner._seed_plan))


def _mapped_expert(
    mapping: Callable[[list[Params]], list[Params]], plan: SeedPlan, now: list[Params]
) -> Params | None:
    """What runs in the expert default's place once the `seeds` hook (`mapping`) mapped
    `plan.now` to `now`: the config at its place where the hook kept every seed, else the
    expert default mapped alone. Not that where a seed ran before it: the replay's hook maps
    each seed to the nearest recorded config not yet taken, so alone an unrecorded expert
    default could map to the fp8 seed's config, and the fp8 seed would be marked the expert
    default."""
    if plan.expert is None:
        return None
    if plan.expert in plan.now and len(now) == len(plan.now):
        return now[plan.now.index(plan.expert)]
    return mapping([plan.expert])[0]
