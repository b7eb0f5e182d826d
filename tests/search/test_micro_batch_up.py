"""The next micro-batch up where a measured peak leaves room for it (search/micro_batch_up.py):
a real coordinator on a real database, trials answered by a replay of a fake GPU whose memory
behaves like a real one (tests/fakes.py physical_landscape: the cost model's components times
hidden factors, so the prior's expert default leaves memory unused that a measured peak shows)."""

from __future__ import annotations

from typing import Any

import pytest

from autotuner.executors.base import Target
from autotuner.purpose import SEARCH_TRIALS, Purpose
from autotuner.search.headroom import need_gib, usable_gib
from autotuner.search.micro_batch_up import Z_ROOM, leaders
from autotuner.search.space import parse_space
from autotuner.spec import TrialResult, canonical_params
from autotuner.storage.session import Database
from tests.fakes import FAKE_H200, measured, physical_landscape
from tests.search.conftest import GPT2, make_policy

KNOBS: dict[str, list[Any]] = {
    "micro_batch_size": [8, 16, 32, 64, 128, 256],
    "attention": ["flash", "cudnn", "efficient"],
}
FIXED = {"precision": "bf16", "compile_mode": "default", "vocab_pad_multiple": 64}


def _gpu(memory_gib: float) -> tuple[Target, Any]:
    fingerprint = FAKE_H200.model_copy(update={"memory_total_gib": memory_gib})
    return Target.from_fingerprint(fingerprint), fingerprint


def _study(db: Database, run_study, memory_gib: float):
    space = parse_space({"name": "mb-up", "knobs": KNOBS, "fixed": FIXED})
    target, fingerprint = _gpu(memory_gib)
    landscape = physical_landscape(
        GPT2, KNOBS, fixed=FIXED, limit_gib=memory_gib, fingerprint=fingerprint
    )
    table = {canonical_params(p): r for p, r in landscape.entries}
    _, _, trials, _ = run_study(
        db, space=space, landscape=landscape, target=target, trials=8, options={"history_seeds": 0}
    )
    search = sorted((t for t in trials if t.purpose in SEARCH_TRIALS), key=lambda t: t.number)
    return space, target, table, search


def _true_need(table: dict[str, TrialResult], params: dict[str, Any]) -> float | None:
    result = table[canonical_params({k: params[k] for k in KNOBS})]
    return need_gib(result) if result.tokens_per_s else None


def test_where_the_expert_defaults_peak_leaves_room_its_next_micro_batch_runs_next(
    db, run_study
) -> None:
    # 80 GiB: the prior's pessimistic end puts the expert default at micro-batch 64, whose
    # measured need (26 GiB) leaves room for 128 (49 GiB) inside the 72 GiB the headroom keeps.
    _, target, table, search = _study(db, run_study, 80.0)
    expert, after = search[0], search[1]
    assert expert.purpose == Purpose.EXPERT_DEFAULT
    mb = expert.params["micro_batch_size"]
    usable = usable_gib(target.memory_gib, 0.1)
    assert usable is not None
    up = {**expert.params, "micro_batch_size": 2 * mb}
    need_up = _true_need(table, up)
    assert need_up is not None and need_up <= usable  # the room is really there
    # The next trial launched is that config, marked a seed (not the sampler's proposal).
    assert after.params == up
    assert after.purpose == Purpose.SEED
    # Once 2 x mb is measured and 4 x would not keep the headroom, the climb stops there.
    four = {**expert.params, "micro_batch_size": 4 * mb}
    if 4 * mb in KNOBS["micro_batch_size"] and (_true_need(table, four) or 1e9) > usable:
        assert four not in [t.params for t in search]


def test_where_the_expert_defaults_peak_leaves_no_room_the_next_micro_batch_is_not_run(
    db, run_study
) -> None:
    # 94 GiB: the expert default takes micro-batch 128 (49 GiB measured); 256 would need
    # about 89 GiB, over the 85 the headroom keeps.
    _, target, table, search = _study(db, run_study, 94.0)
    expert = search[0]
    mb = expert.params["micro_batch_size"]
    up = {**expert.params, "micro_batch_size": 2 * mb}
    usable = usable_gib(target.memory_gib, 0.1)
    assert usable is not None and (_true_need(table, up) or 1e9) > usable
    assert up not in [t.params for t in search]


def _policy(memory_gib: float):
    space = parse_space({"name": "mb-up", "knobs": KNOBS, "fixed": FIXED})
    target, _ = _gpu(memory_gib)
    return make_policy(space, target=target, history_seeds=0)


def _result(tps: float, need: float, limit: float) -> TrialResult:
    # need_gib = reserved + the CUDA context (0.6 GiB)
    return measured(
        tps,
        peak_mem_gib=(need - 0.6) / 1.04,
        peak_reserved_gib=need - 0.6,
        memory_limit_gib=limit,
        memory_kind="cuda",
        wall_s=20.0,
    )


def test_the_room_is_the_measured_peak_plus_the_calibrated_increase() -> None:
    policy = _policy(80.0)
    expert = policy.expert_params()
    roomy = {**expert, "micro_batch_size": 32}
    policy.observe(0, roomy, _result(1000.0, 15.0, 80.0), Purpose.EXPERT_DEFAULT)
    assert policy.micro_batch_up is not None
    room = policy.micro_batch_up.room(roomy)
    assert room is not None and room.params == {**roomy, "micro_batch_size": 64}
    # The increase: the calibrated estimates' difference (the static part cancels).
    cost = policy.cost
    before, after = (cost.predict(policy.knobs(p)) for p in (roomy, room.params))
    assert room.need_gib - 15.0 == pytest.approx(after.need_gib - before.need_gib, rel=1e-6)
    assert 0 < room.sd_gib < after.sd_gib  # only the difference's doubt
    assert room.fits and policy.suggest(set()) == room.params
    assert policy.purpose(room.params) == Purpose.SEED
    # Measured, it is not proposed again; a measured peak near the limit leaves no room.
    assert policy.suggest({canonical_params(room.params)}) != room.params
    tight = _policy(80.0)
    tight.observe(0, roomy, _result(1000.0, 70.0, 80.0), Purpose.EXPERT_DEFAULT)
    assert tight.micro_batch_up is not None and not tight.micro_batch_up.room(roomy).fits
    assert tight.next_micro_batch_up(set()) is None
    assert Z_ROOM > 0


def test_the_config_that_leads_gets_its_next_micro_batch_not_one_behind_it() -> None:
    policy = _policy(80.0)
    expert = policy.expert_params()
    slow = {**expert, "micro_batch_size": 16}
    fast = {**expert, "micro_batch_size": 16, "attention": "cudnn"}
    policy.observe(0, slow, _result(1000.0, 12.0, 80.0), Purpose.EXPERT_DEFAULT)
    policy.observe(1, fast, _result(1300.0, 12.0, 80.0), Purpose.SEED)
    assert [p["attention"] for p in leaders(policy.progress.values, 0.02)] == ["cudnn"]
    assert policy.next_micro_batch_up(set()) == {**fast, "micro_batch_size": 32}
    # Where the leader's is taken, the one behind it is not proposed instead.
    taken = {canonical_params({**fast, "micro_batch_size": 32})}
    assert policy.next_micro_batch_up(taken) is None


def test_no_memory_to_weigh_no_next_micro_batch() -> None:
    # A CPU without a memory cap: nothing says a larger micro-batch has room.
    space = parse_space({"name": "mb-up", "knobs": KNOBS, "fixed": FIXED})
    policy = make_policy(space, target=Target("cpu", 0), history_seeds=0)
    params = {**policy.expert_params(), "micro_batch_size": 8}
    result = measured(100.0, peak_mem_gib=1.0, memory_kind="cpu_rss")
    policy.observe(0, params, result, Purpose.EXPERT_DEFAULT)
    assert policy.next_micro_batch_up(set()) is None
