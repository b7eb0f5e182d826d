"""Proposals made while other trials run (several GPUs, one trial each): the throughput model's
next config is neither one running nor, where an alternative of similar worth exists, of the
same kind (micro-batch, precision, compile) as every one running (search/proposer.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from autotuner.executors.replay import ReplayExecutor
from autotuner.search.proposer import batch_kind
from autotuner.spec import canonical_params
from tests.fakes import measured
from tests.search.conftest import GPT2, H200, gpt2_landscape, gpt2_space, make_policy

Params = dict[str, Any]


def _policy_after_expert(knobs: dict[str, list[Any]] | None = None) -> tuple[Any, Params]:
    """A GPT-2 study's policy on the fake H200 that has measured its expert default."""
    policy = make_policy(gpt2_space(knobs))
    policy.enable_proposals(seed=0)
    expert = policy.expert_params()
    peak = policy.cost.predict(policy.knobs(expert)).allocated_gib
    result = measured(200_000.0, wall_s=30.0, compile_s=20.0, peak_mem_gib=peak)
    policy.observe(0, expert, result, "expert-default")
    return policy, expert


def test_the_next_proposal_is_of_another_kind_than_the_trials_running() -> None:
    policy, expert = _policy_after_expert()
    # The throughput model's proposals: the expert default's next micro-batch up, which its
    # measured peak leaves room for (search/micro_batch_up.py), is taken (it runs first).
    up = policy.next_micro_batch_up({canonical_params(expert)})
    done = {canonical_params(expert)} | ({canonical_params(up)} if up else set())
    first = policy.suggest(done)
    assert first is not None
    taken = done | {canonical_params(first)}
    # Alone, the model's next pick is a one-knob neighbour of the first: the same micro-batch,
    # precision and compile (its attention differs), a near-duplicate while the first runs.
    alone = policy.suggest(taken)
    assert alone is not None and batch_kind(policy.knobs(alone)) == batch_kind(policy.knobs(first))
    running = [first]
    for _ in range(3):  # three GPUs more: each proposal made while the others run
        params = policy.suggest(taken, running)
        assert params is not None
        assert canonical_params(params) not in taken
        kinds = {batch_kind(policy.knobs(p)) for p in running}
        assert batch_kind(policy.knobs(params)) not in kinds, (params, running)
        taken.add(canonical_params(params))
        running.append(params)


def test_where_every_alternative_is_of_the_running_kind_the_best_still_runs() -> None:
    """Only attention is searched: every candidate shares the running trial's kind, and the
    best of them is proposed rather than nothing."""
    knobs = {"micro_batch_size": [64], "attention": ["flash", "efficient", "math"]}
    policy, expert = _policy_after_expert(knobs)
    taken = {canonical_params(expert)}
    first = policy.suggest(taken)
    assert first is not None
    taken.add(canonical_params(first))
    assert policy.suggest(taken, [first]) == policy.suggest(taken)


def test_the_coordinator_proposes_knowing_what_runs(db: Any) -> None:
    """On two replayed GPUs the coordinator hands the proposer the search trials in flight."""
    from autotuner.study.coordinator import StudyRunner, create_study

    space = gpt2_space()
    study_id = create_study(db, model=GPT2, space=space, max_trials=8)
    two = dataclasses.replace(H200, gpus_total=2)
    executor = ReplayExecutor(gpt2_landscape(), list(space.knobs), slots=2, target=two)
    runner = StudyRunner(db, study_id, executor, poll_s=0.0)
    runner.start()
    calls: list[tuple[set[str], list[Params]]] = []
    suggest = runner.policy.suggest

    def spy(exclude: set[str], pending: Any = ()) -> Params | None:
        calls.append((set(exclude), list(pending)))
        return suggest(exclude, pending)

    runner.policy.suggest = spy  # type: ignore[method-assign]
    while not runner.done:
        runner.step()
    with_pending = [(ex, p) for ex, p in calls if p]
    assert with_pending, "no proposal was made while another trial ran"
    for exclude, pending in with_pending:
        assert all(canonical_params(p) in exclude for p in pending)
