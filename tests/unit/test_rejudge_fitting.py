"""The re-judge's configs that fit at a headroom (study/recommend_measured.py) are those the
full computation ranks, where a config's measurements straddle the headroom (one tight, one
not), medians tie, and re-measured configs rank first; and the recommendation from them is
the one computed from the trials."""

from __future__ import annotations

import json
import random

import pytest

from autotuner.options import StudyOptions
from autotuner.search.objective import Objective
from autotuner.spec import Knobs, ModelSpec, TrialConfig
from autotuner.storage.models import Trial, TrialState
from autotuner.study.measurements import over_memory, rank_groups, study_noise_rel
from autotuner.study.recommend import pareto, recommend, recommend_from
from autotuner.study.recommend_measured import MeasuredConfigs
from tests.fakes import measured

LIMIT_GIB = 80.0


def _trials(rng: random.Random, peak_step: float | None = None) -> list[Trial]:
    """40 configs measured one to three times each (later ones re-measurements), at a few
    throughputs (ties), their peaks spread across the headrooms below (a config's own
    measurements on both sides of one), at two global batches, the first the expert default.
    `peak_step`: peaks rounded to it, so that configs tie on memory too."""
    model = ModelSpec.resolve({"preset": "tiny"})
    configs = [
        TrialConfig(model=model, knobs=Knobs(grad_accum=accum)).model_dump(mode="json")
        for accum in (1, 2)
    ]
    out, number = [], 0
    for mb in rng.sample(range(1, 200), 40):
        for i in range(rng.choice([1, 1, 2, 3])):
            tps = float(rng.choice([900, 1000, 1000, 1100, 1200]) + (mb % 3))
            peak = rng.uniform(55.0, 78.0)
            if peak_step is not None:
                peak = round(peak / peak_step) * peak_step
            result = measured(
                tps,
                peak_mem_gib=peak,
                peak_reserved_gib=peak,
                memory_kind="cuda",
                memory_limit_gib=LIMIT_GIB,
            )
            out.append(
                Trial(
                    number=number,
                    state=TrialState.COMPLETE.value,
                    purpose="remeasure" if i else ("expert-default" if number == 0 else "search"),
                    objective_value=tps,
                    params={"micro_batch_size": mb},
                    config=configs[mb % 2],
                    result=result.model_dump(mode="json"),
                )
            )
            number += 1
    rng.shuffle(out)
    return out


HEADROOMS = (0.0, 0.03, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_configs_that_fit_are_those_the_full_ranking_keeps(seed: int) -> None:
    trials = _trials(random.Random(seed))
    configs = MeasuredConfigs(trials)
    every = configs.fitting(StudyOptions(headroom=0.0)).ranked
    straddled = 0
    for headroom in HEADROOMS:
        for ceiling in (None, 70.0):
            options = StudyOptions(headroom=headroom, max_mem_gib=ceiling)
            fits = [(key, t) for key, t in configs.keyed if not over_memory(t, options)]
            full = rank_groups(fits)
            fit = configs.fitting(options)
            got = fit.ranked
            assert [(g.key, [t.number for t in g.trials]) for g in got] == [
                (g.key, [t.number for t in g.trials]) for g in full
            ]
            assert fit.noise_rel() == study_noise_rel(full)
            assert fit.completed_trials() == sum(len(g.trials) for g in full)
            kept = {g.key: len(g.trials) for g in got}
            straddled += sum(1 for g in every if 0 < kept.get(g.key, 0) < len(g.trials))
    assert straddled > 0  # the regrouped configs were exercised


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_recommendation_from_kept_configs_is_the_full_one(seed: int) -> None:
    trials = _trials(random.Random(seed))
    configs = MeasuredConfigs(trials)
    for headroom in HEADROOMS:
        options = StudyOptions(headroom=headroom)
        full = recommend(trials, Objective.TOKENS_PER_S, options=options)
        kept = recommend_from(configs, Objective.TOKENS_PER_S, options)
        assert json.dumps(kept, sort_keys=True) == json.dumps(full, sort_keys=True)


@pytest.mark.parametrize(
    ("seed", "peak_step"), [(1, None), (2, None), (2, 4.0), (3, 4.0), (5, 4.0)]
)
def test_the_kept_order_sweeps_the_front_pareto_finds(seed: int, peak_step: float | None) -> None:
    """Fitting.pareto_front (one sweep over the order MeasuredConfigs kept, less the configs
    gone at a headroom) and recommend.pareto (the ranked configs' points sorted and swept)
    give the same points in the same order; with peaks rounded, configs equal in throughput
    and memory both are on the front, and both keep the one ranked first."""
    rng = random.Random(seed)
    configs = MeasuredConfigs(_trials(rng, peak_step))
    compared = with_gone = ties = 0
    for headroom in HEADROOMS:
        for ceiling in (None, 62.0, 70.0):
            fit = configs.fitting(StudyOptions(headroom=headroom, max_mem_gib=ceiling))
            keys = [g.key for g in fit.ranked]
            for failed in (set(), set(keys[:1]), set(rng.sample(keys, len(keys) // 3))):
                front = fit.pareto_front(failed)
                if front is None:  # a config grouped again: the caller sweeps itself
                    continue
                groups = [g for g in fit.ranked if g.key not in failed]
                full = pareto(groups, fit.peak_median)
                assert [(g.first.number, v, m) for g, v, m in front] == [
                    (p.trial_number, p.objective_value, p.peak_mem_gib) for p in full
                ]
                compared += 1
                with_gone += bool(fit.touched)
                points = [(g.median, fit.peak_median(g)) for g in groups]
                ties += sum(points.count((v, m)) > 1 for _, v, m in front)
    assert compared > 0 and with_gone > 0  # configs gone at a headroom were left out
    assert ties > 0 or peak_step is None
