"""The live recommendation kept one finished trial at a time (study/live_increment.py) is the
one computed from every trial, key for key, on random streams of trials: new configs, repeated
configs, re-measurements, the expert default, tight and stopped-early measurements, failures
and pruned proposals, in random order."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from autotuner.options import StudyOptions
from autotuner.purpose import Purpose
from autotuner.search.objective import Objective
from autotuner.search.space import load_space
from autotuner.spec import FailureClass, ModelSpec, TrialConfig, TrialResult, TrialStatus
from autotuner.storage.models import TrialState
from autotuner.storage.session import Database
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import create_study
from autotuner.study.live import live_best
from autotuner.study.live_increment import LiveBest
from bench.reads_lib.seed import _propose, _result

KINDS = {
    "new": 60,
    "again": 12,  # a config measured before, proposed again
    "remeasure": 4,
    "tight": 6,  # less memory free than the headroom
    "stopped": 4,  # stopped after its first repeats
    "failed": 6,
    "pruned": 6,
}


class Stream:
    """Trials written as the coordinator writes them (a running row, then its result)."""

    def __init__(self, db: Database, rng: random.Random) -> None:
        self.db, self.rng = db, rng
        self.model = ModelSpec.resolve({"preset": "gpt2-124m"})
        held = 64 * 4 * self.model.seq_len
        self.space = load_space("single-gpu").model_copy(update={"global_batch_tokens": held})
        self.study_id = create_study(db, model=self.model, space=self.space, max_trials=10_000)
        self.measured: list[tuple[float, dict[str, Any]]] = []

    def _config(self, params: dict[str, Any]) -> TrialConfig:
        knobs = self.space.knobs_for(params, self.model, 1)
        return TrialConfig(
            study_id=self.study_id,
            trial_number=0,
            model=self.model,
            knobs=knobs,
            measure=self.space.measure,
            num_gpus=1,
        )

    def one(
        self,
        kind: str,
        purpose: str = Purpose.SEARCH,
        params: dict[str, Any] | None = None,
        scale: float = 1.0,
    ) -> None:
        """One more trial of `kind`: new params (or these), its throughput x `scale`."""
        self.start(kind, purpose, params, scale)()

    def start(
        self,
        kind: str,
        purpose: str = Purpose.SEARCH,
        params: dict[str, Any] | None = None,
        scale: float = 1.0,
    ) -> Callable[[], None]:
        """One more trial of `kind` dispatched (its running row written); what writes its
        result (as `one`)."""
        chosen, params = params is not None, params or _propose(self.space, self.rng)
        if kind in ("again", "remeasure") and self.measured and not chosen:
            ranked = sorted(self.measured, key=lambda m: -m[0])
            top = kind == "remeasure" or self.rng.random() < 0.3  # the top ones, or any
            params = self.rng.choice(ranked[:3] if top else ranked)[1]
            purpose = Purpose.REMEASURE if kind == "remeasure" else purpose
        config = self._config(params)
        stored = config.model_dump(mode="json")
        with self.db.session() as s:
            repo = TrialRepo(s)
            if kind == "pruned":
                repo.create_pruned(
                    self.study_id,
                    params=params,
                    config=stored,
                    error_class="oom",
                    error_message="predicted out of memory",
                )
                return lambda: None
            number = repo.create_running(
                self.study_id, params=params, config=stored, purpose=purpose
            ).number
        return lambda: self._finish(kind, params, config, number, scale)

    def _finish(
        self, kind: str, params: dict[str, Any], config: TrialConfig, number: int, scale: float
    ) -> None:
        result = _result(params, config, self.rng)
        if kind == "failed":
            result = TrialResult.failure(FailureClass.TIMEOUT, "no result within 900 s")
        elif kind == "tight" and result.status == TrialStatus.OK:
            result = result.model_copy(update={"peak_mem_gib": 128.0, "peak_reserved_gib": 131.0})
        elif kind == "stopped" and result.status == TrialStatus.OK:
            result = result.model_copy(update={"stopped_early": True})
        ok = result.status == TrialStatus.OK
        if ok:  # repeat spreads wide enough that their median is the study's noise band
            tps = result.tokens_per_s or 0.0
            if kind == "again":  # another process of the same config, far from the first
                tps *= self.rng.uniform(0.5, 1.0)
            tps *= scale
            spread = self.rng.uniform(0.0, 0.12) * tps
            result = result.model_copy(
                update={
                    "tokens_per_s": tps,
                    "tokens_per_s_min": tps - spread,
                    "tokens_per_s_max": tps + spread,
                }
            )
        state = (
            TrialState.COMPLETE
            if ok
            else (TrialState.INFEASIBLE if kind != "failed" else TrialState.FAILED)
        )
        with self.db.session() as s:
            repo = TrialRepo(s)
            row = repo.get(self.study_id, number)
            assert row is not None
            value = result.tokens_per_s if ok else None
            repo.finish(row, state, result=result, objective_value=value)
        if ok and kind not in ("tight", "stopped"):
            self.measured.append((result.tokens_per_s or 0.0, params))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_kept_recommendation_is_the_full_one(sqlite_url: str, seed: int) -> None:
    db = Database(sqlite_url)
    rng = random.Random(seed)
    stream = Stream(db, rng)
    live = LiveBest(db)
    options = StudyOptions()
    stream.one("new", Purpose.EXPERT_DEFAULT)
    trials = 160
    for _ in range(trials):
        stream.one(rng.choices(list(KINDS), weights=list(KINDS.values()))[0])
        kept = live.store(stream.study_id, Objective.TOKENS_PER_S, options)
        full = live_best(db, stream.study_id, Objective.TOKENS_PER_S, options)
        assert json.dumps(kept, sort_keys=True) == json.dumps(full, sort_keys=True)
    # The stream reached the kept path, not only full computations.
    assert live.full_computations < trials // 2, live.full_computations


@pytest.mark.parametrize("seed", [5, 6])
def test_trials_that_end_while_earlier_ones_run_are_in_the_kept_recommendation(
    sqlite_url: str, seed: int
) -> None:
    """Trials run at once end out of number order: one that ended while an earlier-numbered
    one still runs is in the live recommendation at once (the full one reads it), and the
    earlier one is folded in when it ends, each once."""
    db = Database(sqlite_url)
    rng = random.Random(seed)
    stream = Stream(db, rng)
    live = LiveBest(db)
    options = StudyOptions()
    stream.one("new", Purpose.EXPERT_DEFAULT)
    for _ in range(30):
        stream.one("new")
    live.store(stream.study_id, Objective.TOKENS_PER_S, options)
    running: list[Callable[[], None]] = []
    trials = 160
    for _ in range(trials):
        kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        finish = stream.start(kind)
        if rng.random() < 0.2:  # held: it ends after later trials
            running.append(finish)
        else:
            finish()
        if running and rng.random() < 0.2:
            running.pop(rng.randrange(len(running)))()
        kept = live.store(stream.study_id, Objective.TOKENS_PER_S, options)
        full = live_best(db, stream.study_id, Objective.TOKENS_PER_S, options)
        assert json.dumps(kept, sort_keys=True) == json.dumps(full, sort_keys=True)
    assert live.full_computations < trials // 2, live.full_computations


def test_a_config_whose_trials_end_out_of_number_order_is_named_by_its_first(
    sqlite_url: str,
) -> None:
    """Two trials of one new config run at once and the later-numbered ends first: the full
    computation names the config (on the Pareto front) by its lower-numbered trial."""
    db = Database(sqlite_url)
    rng = random.Random(103)
    stream = Stream(db, rng)
    live = LiveBest(db)
    options = StudyOptions()
    stream.one("new", Purpose.EXPERT_DEFAULT)
    for _ in range(25):
        stream.one("new")
    live.store(stream.study_id, Objective.TOKENS_PER_S, options)
    on_front = 0
    for _ in range(40):
        params = _propose(stream.space, rng)
        first = stream.start("new", params=params)
        stream.start("new", params=params)()
        live.store(stream.study_id, Objective.TOKENS_PER_S, options)
        first()
        kept = live.store(stream.study_id, Objective.TOKENS_PER_S, options)
        full = live_best(db, stream.study_id, Objective.TOKENS_PER_S, options)
        assert json.dumps(kept, sort_keys=True) == json.dumps(full, sort_keys=True)
        on_front += any(p["params"] == params for p in full["pareto"])
    assert on_front  # the case above was reached: such a config on the front


def test_a_top_config_measured_again_lower_moves_the_choice(sqlite_url: str) -> None:
    """The runner-up measured again far below: its median, the runner-up's entry and maybe
    which config is the runner-up change; computed in full, not kept."""
    db = Database(sqlite_url)
    stream = Stream(db, random.Random(4))
    live = LiveBest(db)
    options = StudyOptions()
    for _ in range(40):
        stream.one("new")
    live.store(stream.study_id, Objective.TOKENS_PER_S, options)
    before = live.full_computations
    runner_up = live_best(db, stream.study_id, Objective.TOKENS_PER_S, options)["runner_up"]
    with db.read() as s:
        row = TrialRepo(s).get(stream.study_id, runner_up["trial_number"])
        assert row is not None
        params = dict(row.params)
    stream.one("again", params=params, scale=0.01)
    kept = live.store(stream.study_id, Objective.TOKENS_PER_S, options)
    full = live_best(db, stream.study_id, Objective.TOKENS_PER_S, options)
    assert full["runner_up"] != runner_up
    assert json.dumps(kept, sort_keys=True) == json.dumps(full, sort_keys=True)
    assert live.full_computations == before + 1  # a top config moved: computed in full
