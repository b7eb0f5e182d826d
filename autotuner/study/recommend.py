"""The recommendation: the winner, its margin over the runner-up, and the evidence behind it.

Measurements of one config are pooled: the search trial and its re-measurements (purpose
`remeasure`, fresh processes, interleaved A B A B after the search) count together, each
measurement being the median of its repeats. When the top candidates were re-measured, the
winner is chosen among them on the pooled median, and the margin over the runner-up is compared
with the noise: the larger of the within-trial repeat spread and the spread between fresh
processes. A margin inside the noise is called a tie, plainly.

Also here: the Pareto set of throughput against peak memory, and the knob report
(`autotuner.search.importance`). A trial over the memory ceiling (options.max_mem_gib) is never
recommended, nor one that leaves less than the memory headroom free (`search/headroom.py`), nor
a config that failed its headroom check (`search/headroom_check.py`) or its numerics check
(`autotuner.search.numerics`): the next candidate is, and the `headroom` and `numerics`
entries say why. The `global_batch` entry says which global batch the winner ran and whether
the trials compared like with like (`study/batch.py`). On loader or file data, the
`input_pipeline` entry says whether the winner waits for its batches (study/input_pipeline.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from autotuner.options import StudyOptions
from autotuner.purpose import Purpose
from autotuner.search import headroom, headroom_check
from autotuner.search.importance import knob_report
from autotuner.search.numerics import checks_of, choose, prefer_reference_numerics
from autotuner.search.numerics_entry import numerics_entry
from autotuner.search.objective import Objective, time_to_train_h
from autotuner.search.pareto import pareto_sweep
from autotuner.spec import TrialResult, canonical_params
from autotuner.storage.models import Trial, TrialState
from autotuner.study.batch import global_batch_entry
from autotuner.study.columns import load_json, memory_record
from autotuner.study.compile_time import compile_entry
from autotuner.study.fresh_run import fresh_run_entry
from autotuner.study.gpu_clock import gpu_clock_entry
from autotuner.study.input_pipeline import input_pipeline_entry
from autotuner.study.measurements import (
    ConfigMeasurements,
    max_of,
    median_of,
    min_of,
    over_memory,
    rank_groups,
)
from autotuner.study.recommend_measured import Fitting, MeasuredConfigs
from autotuner.study.recommendation import ParetoPoint, Recommendation, RunnerUp


def recommend(
    trials: Sequence[Trial],
    objective: Objective,
    *,
    options: StudyOptions | None = None,
    evidence: bool = False,
    extras: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The winner as it is stored and served (`Recommendation.stored()`), or None when no
    trial completed.

    `evidence` adds the knob report (each knob's effect, verdict and importance), which the
    coordinator stores once at the end of a study; live views leave it out.
    """
    rec, ranked = recommend_ranked(trials, objective, options=options)
    if rec is None:
        return None
    entries = dict(extras or {})
    if evidence:
        entries["importance"] = knob_importance(ranked, rec.noise_rel)
    return (rec.with_entries(**entries) if entries else rec).stored()


def recommend_ranked(
    trials: Sequence[Trial], objective: Objective, *, options: StudyOptions | None = None
) -> tuple[Recommendation | None, list[ConfigMeasurements]]:
    """`recommend` without its evidence, and the measured configs (ranked; early-stopped ones
    included), from which `knob_importance` computes the knob report (the coordinator
    computes it once the transaction that read the trials is over)."""
    options = options or StudyOptions()
    configs = MeasuredConfigs(trials)
    rec, ranked = _recommendation(configs, objective, options)
    if rec is None or not configs.stopped:
        return rec, ranked
    # The knob report reads every measured config, early-stopped ones too (a config far below
    # the best is exactly what shows a knob matters); without any, they are `ranked`.
    return rec, rank_groups(
        [(key, t) for key, t in configs.evidence if not over_memory(t, options)]
    )


def recommend_from(
    configs: MeasuredConfigs, objective: Objective, options: StudyOptions
) -> dict[str, Any] | None:
    """`recommend` (no evidence) from a study's measured configs, computed once for its
    trials (the re-judge keeps them per study version: study/recommend_cache.py)."""
    rec, _ = _recommendation(configs, objective, options)
    return None if rec is None else rec.stored()


def _recommendation(
    configs: MeasuredConfigs, objective: Objective, options: StudyOptions
) -> tuple[Recommendation | None, list[ConfigMeasurements]]:
    """The recommendation at `options` and the candidates it ranked (the configs that fit)."""
    trials, keyed = configs.trials, configs.keyed
    fit = configs.fitting(options)
    ranked = fit.ranked
    if not ranked:
        return None, ranked
    # A config whose headroom check failed is no candidate (headroom_check.py); if every one
    # failed, they stay, and the fastest is shown with its failing check. Only configs with a
    # check row can have a check: the others are not looked up.
    room = headroom_check.checks_of(fit.with_checks(ranked), configs.check_rows, options)
    if any(check.state == "failed" for check in room.values()):
        eligible = headroom_check.surviving(ranked, room) or ranked
    else:
        eligible = ranked
    checks = checks_of(fit.with_checks(eligible), configs.check_rows)
    chosen = choose(eligible, checks)
    # A config that failed the numerics check is no candidate, nor runner-up; nor is one the
    # bounded check passed over (numerics.choose). If every config failed, the fastest is shown
    # with its failing check.
    failed = {key for key, check in checks.items() if check.state == "failed"}
    if eligible is not ranked:
        alive = {g.key for g in eligible}
        failed |= {key for key in room if key not in alive}
    tied_over: ConfigMeasurements | None = None
    if chosen is None:
        groups = eligible
    else:
        if failed:
            groups = [
                eligible[chosen],
                *(g for g in eligible[chosen + 1 :] if g.key not in failed),
            ]
        else:
            groups = eligible[chosen:]
        # The winner's records and those of the configs that tie it, in one statement: on a
        # tie, the one with the reference's numerics may be recommended instead.
        tied = _ties(groups)  # groups[1 : tied + 1]
        load_json([t for g in groups[: tied + 1] for t in g.trials])
        preferred = prefer_reference_numerics(groups, 0, checks, range(1, tied + 1))
        if preferred:
            # The faster config stays as the runner-up, the first alternative.
            tied_over = groups[0]
            groups = [groups[preferred], *(g for g in groups if g is not groups[preferred])]
    best = groups[0]
    load_json(best.trials)  # the winner's records, in one statement (if not read above)
    result = best.results[0]
    compile_info = compile_entry(best)
    # Entries only some studies have: left unset (out of the stored JSON) where they have none.
    optional: dict[str, Any] = {}
    if objective == Objective.TIME_TO_TRAIN:
        optional["time_to_train_h"] = time_to_train_h(result, options)
    if (scaling := scaling_efficiency(trials, best)) is not None:
        optional["scaling"] = scaling
    expert = fit.expert_default()
    noise = fit.noise_rel()
    if (fresh := fresh_run_entry(best, room, noise)) is not None:
        optional["fresh_run"] = fresh  # the winner timed again by its headroom check
    if (pipeline := input_pipeline_entry(best, ranked, expert)) is not None:
        optional["input_pipeline"] = pipeline  # loader or file data: is the GPU waiting for it?
    rec = Recommendation(
        trial_number=best.first.number,
        objective=objective,
        objective_value=best.median,
        params=best.first.params,
        knobs=best.first.config.get("knobs", {}),
        model=best.first.config.get("model", {}),
        tokens_per_s=statistics.median(r.tokens_per_s or 0.0 for r in best.results),
        tokens_per_s_min=min_of(r.tokens_per_s_min for r in best.results),
        tokens_per_s_max=max_of(r.tokens_per_s_max for r in best.results),
        # Over the same measurements as tokens_per_s (a 1-GPU study printed 381,892 tokens/s
        # beside 382,265 per GPU, the first trial's).
        tokens_per_s_per_gpu=median_of(r.tokens_per_s_per_gpu for r in best.results),
        mfu=result.mfu,
        gpu_clock=gpu_clock_entry(result.telemetry),
        peak_mem_gib=result.peak_mem_gib,
        # The cold compile (a user's first run pays it), not a warm one from the study's cache.
        compile_s=(compile_info or {}).get("cold_s"),
        compile=compile_info,
        fingerprint=result.fingerprint.model_dump() if result.fingerprint else None,
        completed_trials=fit.completed_trials(),
        measurements=len(best.trials),
        measured_trials=[t.number for t in best.trials],
        noise_rel=round(noise, 4),
        runner_up=_runner_up(best, groups[1]) if len(groups) > 1 else None,
        numerics=numerics_entry(
            eligible,
            eligible.index(best),
            checks,
            enabled=options.numerics_check,
            tied_over=tied_over,
        ),
        headroom=headroom_check.headroom_entry(
            best, room, _passed_over_for_memory(best, fit, room, options), options
        ),
        global_batch=global_batch_entry(best, groups, configs.batch_rows, options),
        vs_expert_default=_vs_expert_default(best, expert, keyed, options),
        pareto=_pareto(fit, failed),
        **optional,
    )
    return rec, ranked


def knob_importance(ranked: Sequence[ConfigMeasurements], noise_rel: float) -> list[dict[str, Any]]:
    """The recommendation's `importance` entry (what `evidence=True` adds) for its ranked
    configs (`recommend_ranked`)."""
    return knob_report([(g.first.params, g.median) for g in ranked], noise_rel)


def _passed_over_for_memory(
    best: ConfigMeasurements,
    fit: Fitting,
    room: dict[str, headroom_check.Check],
    options: StudyOptions,
) -> list[dict[str, Any]]:
    """Faster configs that are not recommended for memory: measured tight (less than the
    headroom free), or failed their headroom check. At most three, fastest first."""
    out: list[dict[str, Any]] = []
    # Only a config with a measurement above the winner's median can have a median above it.
    for g in rank_groups(fit.configs.keyed_above(best.median)):
        if g.median <= best.median:
            continue
        if not fit.has(g.key):
            # The memory columns, not the results: there may be many such configs.
            why = _headroom_words(g, options)
            if why is None:
                continue  # excluded for another reason (the max_mem_gib ceiling)
        elif (check := room.get(g.key)) is not None and check.state == "failed":
            why = f"failed its headroom check ({check.text})"
        else:
            continue
        out.append({"trial_number": g.first.number, "objective_value": g.median, "why": why})
    return sorted(out, key=lambda p: -float(p["objective_value"]))[:3]


def scaling_efficiency(trials: Sequence[Trial], best: ConfigMeasurements) -> dict[str, Any] | None:
    """A multi-GPU winner against the same config on one GPU (the study's reference trial):
    per-GPU tokens/s at k GPUs / tokens/s on one. None for single-GPU studies."""
    result = best.results[0]
    ranks = result.num_ranks or 1
    if ranks <= 1:
        return None
    refs = [t for t in trials if t.purpose == Purpose.REFERENCE]
    ref = next((t for t in refs if t.state == TrialState.COMPLETE and t.result), None)
    if ref is None:
        why = "its reference trial failed" if refs else "no reference trial ran"
        return {"gpus": ranks, "efficiency": None, "text": f"not measured: {why}"}
    one = TrialResult.model_validate(ref.result).tokens_per_s or 0.0
    per_gpu = statistics.median((r.tokens_per_s or 0.0) / ranks for r in best.results)
    same = canonical_params(ref.params) == best.key
    eff = per_gpu / one if one else None
    text = (
        f"{eff:.0%} scaling on {ranks} GPUs ({per_gpu:,.0f} tokens/s per GPU against "
        f"{one:,.0f} on one GPU, trial #{ref.number})"
        if eff is not None
        else "not measured: the reference measured no throughput"
    )
    if not same:
        text += "; the reference ran the search's best, not the re-measured winner"
    return {
        "gpus": ranks,
        "efficiency": eff,
        "tokens_per_s_per_gpu": per_gpu,
        "one_gpu_tokens_per_s": one,
        "reference_trial": ref.number,
        "same_config": same,
        "text": text,
    }


def _vs_expert_default(
    best: ConfigMeasurements,
    expert: ConfigMeasurements | None,
    keyed: Sequence[tuple[str, Trial]],
    options: StudyOptions,
) -> dict[str, Any] | None:
    """How much faster the winner is than the expert default: the seed marked so (bf16, fused
    attention, compile, the largest micro-batch that fits: search/seeding.py), by the
    objective's medians. Measured trials only, so the live and final recommendations agree.
    An expert default measured but kept out for memory (`keyed`: every measured config, tight
    ones too) is still the yardstick, and the text says why it is not the recommendation."""
    if not options.expert_seed:
        return None
    over_memory = None
    if expert is None and (expert := _expert_default(rank_groups(_expert_rows(keyed)))) is not None:
        over_memory = _headroom_words(expert, options) or "is over the max_mem_gib ceiling"
    if expert is None:
        return {"trial_number": None, "text": "the expert default was not measured"}
    speedup = best.median / (expert.median or 1.0)
    noise = max(best.noise_rel, expert.noise_rel)
    number = _expert_trial(expert).number
    if expert is best:
        text = "the expert default is the recommendation: nothing in the space beat it"
    elif speedup - 1.0 <= noise and over_memory is None:
        text = (
            f"{speedup:.2f}x the expert default (trial #{number}): within the noise (±{noise:.1%})"
        )
    else:
        text = f"{speedup:.2f}x the expert default (trial #{number}, {expert.median:,.0f})"
    if over_memory is not None:
        text += f", which is not recommended: it {over_memory}"
    ours, theirs = best.first.global_batch_tokens, expert.first.global_batch_tokens
    if expert is not best and ours and theirs and ours != theirs:
        sep = "; " if over_memory is not None else ", "
        text += f"{sep}at {ours / theirs:g}x its global batch: another training run"
    out: dict[str, Any] = {
        "trial_number": number,
        "objective_value": expert.median,
        "speedup": round(speedup, 4),
        "noise_rel": noise,
        "text": text,
    }
    if over_memory is not None:
        out["not_recommended"] = over_memory
    return out


def _expert_rows(keyed: Sequence[tuple[str, Trial]]) -> list[tuple[str, Trial]]:
    """The measurements of the expert default's config (the only config `_expert_default`
    reads)."""
    key = next((k for k, t in keyed if t.purpose == Purpose.EXPERT_DEFAULT), None)
    return [(k, t) for k, t in keyed if k == key] if key is not None else []


def _headroom_words(group: ConfigMeasurements, options: StudyOptions) -> str | None:
    """`leaves 9.7% free, less than the 10% headroom` for a config kept out for its headroom;
    None when none of its measurements broke it (kept out by the max_mem_gib ceiling)."""
    records = [r for t in group.trials if (r := memory_record(t)) is not None]
    worst = max(records, key=lambda r: headroom.violation(r, options), default=None)
    if worst is None or headroom.violation(worst, options) <= 0:
        return None
    free = headroom.free_rel(headroom.need_gib(worst), worst.memory_limit_gib)
    return f"leaves {free:.1%} free, less than the {options.headroom:.0%} headroom"


def _expert_default(ranked: Sequence[ConfigMeasurements]) -> ConfigMeasurements | None:
    """The measured config of the expert-default seed (none where the study ran none)."""
    return next(
        (g for g in ranked if any(t.purpose == Purpose.EXPERT_DEFAULT for t in g.trials)), None
    )


def _expert_trial(expert: ConfigMeasurements) -> Trial:
    """The expert default's own measured trial (its config's others are re-measurements)."""
    return next(t for t in expert.trials if t.purpose == Purpose.EXPERT_DEFAULT)


# How many configs tied with the winner are looked at for the reference's numerics: their
# configs are read (one statement for all), and a study of identical configs ties them all.
TIE_LOOKAHEAD = 8


def _tie(best: ConfigMeasurements, other: ConfigMeasurements) -> bool:
    """Whether two configs' medians are closer than their noise (the runner-up's `tie`)."""
    margin = best.median / (other.median or 1.0) - 1.0
    return margin <= max(best.noise_rel, other.noise_rel)


def _ties(groups: Sequence[ConfigMeasurements]) -> int:
    """How many configs after groups[0] tie it, up to TIE_LOOKAHEAD; ranked by median, so the
    first that does not tie ends them."""
    n = 0
    for g in groups[1 : TIE_LOOKAHEAD + 1]:
        if not _tie(groups[0], g):
            break
        n += 1
    return n


def _runner_up(best: ConfigMeasurements, second: ConfigMeasurements) -> RunnerUp:
    margin = best.median / (second.median or 1.0) - 1.0
    noise = max(best.noise_rel, second.noise_rel)
    out: dict[str, Any] = {
        "trial_number": second.first.number,
        "objective_value": second.median,
        "params": second.first.params,
        "margin_rel": margin,
        "noise_rel": noise,
        # Medians closer than their spread are indistinguishable: say so.
        "tie": _tie(best, second),
        "measurements": len(second.trials),
    }
    pairs = _interleaved_pairs(best, second)
    if pairs:
        out["interleaved"] = {
            "pairs": len(pairs),
            "winner_ahead": sum(1 for a, b in pairs if a > b),
            "ratios": [round(a / b, 4) for a, b in pairs],
        }
    if margin < 0:
        # Recommended on a tie for its numerics (numerics.prefer_reference_numerics).
        out["text"] = (
            f"a tie: the runner-up is {-margin / (1 + margin):.1%} faster, within the noise "
            f"(±{noise:.1%}), but changes numerics without a passed check"
        )
    elif out["tie"]:
        out["text"] = (
            f"a tie: {margin:+.1%} is within the noise (±{noise:.1%}); either config will do"
        )
    else:
        out["text"] = f"wins by {margin:+.1%}, beyond the noise (±{noise:.1%})"
    return RunnerUp.model_validate(out)


def _interleaved_pairs(a: ConfigMeasurements, b: ConfigMeasurements) -> list[tuple[float, float]]:
    ra = [t for t in a.trials if t.purpose == Purpose.REMEASURE]
    rb = [t for t in b.trials if t.purpose == Purpose.REMEASURE]
    return [
        (x.objective_value or 0.0, y.objective_value or 0.0) for x, y in zip(ra, rb, strict=False)
    ]


def _pareto(fit: Fitting, failed: set[str]) -> list[ParetoPoint]:
    """pareto() over the ranked configs not failed, from the order the study's configs keep
    where it can be (Fitting.pareto_front)."""
    front = fit.pareto_front(failed)
    if front is None:
        return pareto([g for g in fit.ranked if g.key not in failed], fit.peak_median)
    return _points(front)


def _points(front: Sequence[tuple[ConfigMeasurements, float, float]]) -> list[ParetoPoint]:
    return [
        ParetoPoint(
            trial_number=g.first.number, objective_value=v, peak_mem_gib=m, params=g.first.params
        )
        for g, v, m in front
    ]


def pareto(
    groups: Sequence[ConfigMeasurements],
    peak_of: Callable[[ConfigMeasurements], float | None],
) -> list[ParetoPoint]:
    """Configs no other config beats on both objective (higher) and peak memory (lower);
    `peak_of`: a config's median peak (None: not measured)."""
    points = []
    for g in groups:
        if (peak := peak_of(g)) is not None:
            points.append((g, g.median, peak))
    return _points([points[i] for i in pareto_sweep([(v, m) for _, v, m in points])])
