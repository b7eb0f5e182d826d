"""Search efficiency: replay a recorded landscape through the real coordinator.

For each strategy and seed, a fresh SQLite database (migrated by the real migrations), the real
`StudyRunner` and a `ReplayExecutor` answering each trial with its recorded result. Reported per
strategy, over the seeds: trials and simulated GPU-seconds (each answered trial's recorded
wall_s; pruned proposals cost nothing) until the best config found is within 2% of the
landscape's best, as median and p90; OOM trials launched; trials launched that the rules call
impossible; predicted-OOM precision and recall against the recorded results.

Strategies: `ours` (TPE + rules + cost model + seeding + early stop + re-measurement),
`ours-noseed` (the same without the expert and history seeds: what the guards and TPE do on
their own), `tpe` (Optuna's TPE alone), `random`, `grid`; the last three launch whatever their
sampler proposes.

A recorded landscape need not be a full grid (bench/gpu_validation.py records sweeps around a
base config). Its configs are then the universe every strategy searches: each proposal, the
seeds included, becomes the nearest recorded config not yet measured (`UniverseSampler`,
`Snapper`: categorical knobs count 1 per difference, numeric ones |log2 a - log2 b|). Random
search is then uniform over the recording; TPE and ours propose in the space and are snapped.
The report gives the grid size and how many configs were recorded.

    python bench/replay.py --landscape bench/results/landscape_gpt2_124m_h200.json --seeds 20
    autotuner bench replay --landscape FILE [--space FILE|auto] --seeds 20 --out bench/results
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotuner.executors.base import Target
from autotuner.executors.replay import Landscape, ReplayExecutor
from autotuner.options import PLAIN_SAMPLER, StudyOptions
from autotuner.presets import MODEL_PRESETS
from autotuner.search.costmodel import CostModel
from autotuner.search.policy import Z_PRUNE, Prune, SearchPolicy
from autotuner.search.rules import incompatibility
from autotuner.search.sampler import distributions
from autotuner.search.space import IntRange, SearchSpace, load_space, parse_space
from autotuner.spec import (
    FailureClass,
    Knobs,
    ModelSpec,
    TrialResult,
    TrialStatus,
    canonical_params,
)
from autotuner.storage.models import TrialState
from autotuner.storage.repository import StudyRepo, TrialRepo
from autotuner.storage.session import Database, dispose_engines, upgrade_database
from autotuner.study.coordinator import StudyRunner, create_study

WITHIN = 0.02
PLAIN = PLAIN_SAMPLER
STRATEGIES: dict[str, tuple[str, StudyOptions]] = {
    "ours": ("tpe", StudyOptions()),
    # Ablation: ours without any seed (rules, cost model, early stop, TPE from scratch).
    "ours-noseed": ("tpe", StudyOptions(expert_seed=False, history_seeds=0)),
    "tpe": ("tpe", PLAIN),
    "random": ("random", PLAIN),
    "grid": ("grid", PLAIN),
}


# --------------------------------------------------------------------------- set-up


def auto_space(landscape: Landscape) -> SearchSpace:
    """The knobs that vary in the landscape (their recorded values); the rest fixed."""
    names = set(Knobs.knob_names())
    knobs, fixed = {}, {}
    for name, values in landscape.values().items():
        if name not in names:
            continue
        if len(values) > 1:
            knobs[name] = sorted(values) if all(isinstance(v, int) for v in values) else values
        else:
            fixed[name] = values[0]
    return parse_space(
        {
            "name": "replay-auto",
            "description": "the landscape's varying knobs",
            "knobs": knobs,
            "fixed": fixed,
        },
        source="landscape",
    )


def landscape_model(landscape: Landscape, model: str | None) -> ModelSpec:
    name = model or landscape.meta.get("model")
    if name is None:
        name = next((p.get("model") for p, _ in landscape.entries if p.get("model")), None)
    if isinstance(name, dict):
        return ModelSpec.resolve(name)
    if name not in MODEL_PRESETS:
        raise SystemExit(
            f"the landscape does not name a model preset ({name!r}); pass --model PRESET"
        )
    return ModelSpec.resolve({"preset": name})


def universe(landscape: Landscape, space: SearchSpace) -> dict[str, TrialResult]:
    """The recorded configs inside the space (its fixed values matched), by searched params."""
    out: dict[str, TrialResult] = {}
    for params, result in landscape.entries:
        if any(str(params.get(k, v)) != str(v) for k, v in space.fixed.items()):
            continue
        if not all(k in params and _in(space.knobs[k], params[k]) for k in space.knobs):
            continue
        out.setdefault(canonical_params({k: params[k] for k in space.knobs}), result)
    return out


def _in(domain: Any, value: Any) -> bool:
    if isinstance(domain, IntRange):
        return isinstance(value, int) and domain.low <= value <= domain.high
    return str(value) in {str(getattr(d, "value", d)) for d in domain}


def grid_size(space: SearchSpace) -> int:
    return math.prod(
        (len(d) if isinstance(d, list) else (d.high - d.low) // d.step + 1)
        for d in space.knobs.values()
    )


# --------------------------------------------------------------------------- sparse recordings


class Snapper:
    """Maps a config to the nearest recorded one: categorical knobs count 1 per difference,
    numeric knobs |log2 a - log2 b| (micro-batch 64 vs 128 counts like one categorical)."""

    def __init__(self, table: dict[str, TrialResult], space: SearchSpace) -> None:
        self.names = list(space.knobs)
        self.recorded = [json.loads(k) for k in table]
        self.keys = set(table)
        self.dists = distributions(space)

    def distance(self, a: dict[str, Any], b: dict[str, Any]) -> float:
        d = 0.0
        for n in self.names:
            x, y = a.get(n), b.get(n)
            if (
                isinstance(x, int | float)
                and isinstance(y, int | float)
                and not isinstance(x, bool)
            ):
                d += abs(math.log2(max(x, 1)) - math.log2(max(y, 1)))
            else:
                d += str(x) != str(y)
        return d

    def nearest(self, params: dict[str, Any], exclude: set[str] | frozenset[str] = frozenset()):
        if canonical_params({n: params.get(n) for n in self.names}) in self.keys:
            return params
        pool = [c for c in self.recorded if canonical_params(c) not in exclude] or self.recorded
        return min(pool, key=lambda c: self.distance(c, params))

    def many(self, configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for c in configs:
            snapped = self.nearest(c, {canonical_params(o) for o in out})
            if snapped not in out:
                out.append(snapped)
        return out


class UniverseSampler(optuna.samplers.BaseSampler):
    """Wraps a sampler so each proposal is a recorded config: the inner sampler proposes in the
    space, and an unrecorded proposal becomes the nearest recorded config not yet measured."""

    def __init__(self, inner: optuna.samplers.BaseSampler, snap: Snapper) -> None:
        self.inner, self.snap = inner, snap

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {}  # everything goes through sample_independent -> one snapped config per trial

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> dict[str, Any]:
        return {}

    def before_trial(self, study: Any, trial: Any) -> None:
        self.inner.before_trial(study, trial)
        self._proposal: dict[str, Any] | None = None
        self._trial_id = trial._trial_id

    def sample_independent(self, study: Any, trial: Any, name: str, dist: Any) -> Any:
        if self._proposal is None or self._trial_id != trial._trial_id:
            self._proposal = self._propose(study, trial)
        return self._proposal[name]

    def _propose(self, study: Any, trial: Any) -> dict[str, Any]:
        dists = self.snap.dists
        rel_space = self.inner.infer_relative_search_space(study, trial)
        proposal = dict(self.inner.sample_relative(study, trial, rel_space)) if rel_space else {}
        for name, dist in dists.items():
            if name not in proposal:
                proposal[name] = self.inner.sample_independent(study, trial, name, dist)
        done = {
            canonical_params(t.params)
            for t in study.get_trials(deepcopy=False)
            if t.state.is_finished() and t.params
        }
        return self.snap.nearest(proposal, done)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self.inner.after_trial(study, trial, state, values)


# --------------------------------------------------------------------------- one run


def run_once(
    template_db: Path,
    workdir: Path,
    *,
    strategy: str,
    seed: int,
    landscape: Landscape,
    table: dict[str, TrialResult],
    space: SearchSpace,
    model: ModelSpec,
    target: Target,
    budget: int,
    best: float,
    trace: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    sampler, options = STRATEGIES[strategy]
    db_path = workdir / f"{strategy}-{seed}.db"
    shutil.copy(template_db, db_path)
    url = f"sqlite:///{db_path}"
    db = Database(url)
    study_id = create_study(
        db,
        model=model,
        space=space,
        max_trials=budget,
        sampler=sampler,
        seed=seed,
        options=options,
    )
    executor = ReplayExecutor(landscape, list(space.knobs), target=target)
    runner = StudyRunner(db, study_id, executor, poll_s=0.0, heartbeat_interval_s=3600)
    sparse = len(table) < grid_size(space)
    if sparse:
        # Every proposal (the seeds included) becomes the nearest recorded config: the
        # recording is the universe each strategy searches (see the module docstring).
        snap = Snapper(table, space)
        seeds = SearchPolicy.seeds
        with mock.patch.object(SearchPolicy, "seeds", lambda self, db: snap.many(seeds(self, db))):
            runner.start()
        runner.optuna.sampler = UniverseSampler(runner.optuna.sampler, snap)
        screen = runner.policy.screen

        def recorded_only(params: dict[str, Any], knobs: Knobs) -> Prune | None:
            if canonical_params({k: params[k] for k in space.knobs}) not in table:
                return Prune("unsupported", "not recorded in the landscape", 1.0)
            return screen(params, knobs)

        runner.policy.screen = recorded_only  # type: ignore[method-assign]
    else:
        runner.start()
    t0 = time.perf_counter()
    while not runner.done:
        runner.step()
    wall = time.perf_counter() - t0
    with db.session() as s:
        trials = TrialRepo(s).list(study_id)
        rec = StudyRepo(s).require(study_id).recommendation
    if trace is not None:
        trace.extend(
            {
                "n": t.number,
                "state": t.state,
                "purpose": t.purpose,
                "params": t.params,
                "value": t.objective_value,
                "error": (t.error_message or "")[:120],
            }
            for t in trials
        )
    out = _trajectory(trials, table, space, model, target, best, options)
    out.update(
        strategy=strategy,
        seed=seed,
        coordinator_wall_s=round(wall, 3),
        recommended_within=(rec is not None and rec["objective_value"] >= (1 - WITHIN) * best),
        stopped=(rec or {}).get("stopped"),
    )
    dispose_engines()
    db_path.unlink(missing_ok=True)
    return out


def _trajectory(trials, table, space, model, target, best, options) -> dict[str, Any]:
    launched = 0
    gpu_s = 0.0
    hit: tuple[int, float] | None = None
    ooms = impossible = ooms_before_hit = 0
    tp = fp = fn = 0
    not_recorded = 0
    for t in trials:
        key = canonical_params({k: t.params[k] for k in space.knobs})
        if t.state == TrialState.PRUNED:
            if t.error_message == "not recorded in the landscape":
                not_recorded += 1
            elif t.error_class == "oom":
                truth = table.get(key)
                if truth is not None and truth.failure_class == FailureClass.OOM:
                    tp += 1
                elif truth is not None:
                    fp += 1
            continue
        if t.purpose == "remeasure":
            continue
        launched += 1
        result = TrialResult.model_validate(t.result) if t.result else None
        gpu_s += (result.wall_s or 0.0) if result else 0.0
        knobs = space.knobs_for(t.params, model, 1)
        if incompatibility(knobs, target, model, 1) or space.violated_rule(knobs):
            impossible += 1
        if t.error_class == "oom":
            ooms += 1
            fn += 1
            ooms_before_hit += hit is None
        value = t.objective_value or 0.0
        if hit is None and value >= (1 - WITHIN) * best:
            hit = (launched, gpu_s)
    return {
        "trials_to_2pct": hit[0] if hit else None,
        "gpu_s_to_2pct": round(hit[1], 1) if hit else None,
        "launched": launched,
        "gpu_s_total": round(gpu_s, 1),
        "ooms_launched": ooms,
        "ooms_before_2pct": ooms_before_hit,
        "impossible_launched": impossible,
        "predicted_oom": {"tp": tp, "fp": fp, "fn": fn},
        "pruned_not_recorded": not_recorded,
    }


# --------------------------------------------------------------------------- offline cost model


def cost_model_offline(
    table: dict[str, TrialResult], space: SearchSpace, model: ModelSpec, target: Target
) -> dict[str, Any]:
    """Predicted OOM against every recorded config: uncalibrated, and calibrated on all the
    other recorded configs (leave-one-out), at the pruning threshold the search uses."""
    items = []
    for key, result in table.items():
        params = json.loads(key)
        try:
            knobs = space.knobs_for(params, model, 1)
        except ValueError:
            continue
        if result.status == TrialStatus.OK or result.failure_class == FailureClass.OOM:
            items.append((knobs, result))
    limit = target.memory_gib
    out: dict[str, Any] = {"configs": len(items), "limit_gib": limit, "z": Z_PRUNE}
    for mode in ("uncalibrated", "leave_one_out"):
        tp = fp = fn = tn = 0
        errs = []
        for i, (knobs, result) in enumerate(items):
            cm = CostModel(model, num_gpus=1, on_cuda=target.device_type != "cpu", limit_gib=limit)
            if mode == "leave_one_out":
                for j, (k2, r2) in enumerate(items):
                    if j != i:
                        cm.observe(k2, r2, fit=False)
                cm.calibration.refit()
            pred = cm.predict(knobs)
            is_oom = result.failure_class == FailureClass.OOM
            said = pred.surely_over(Z_PRUNE)
            tp += said and is_oom
            fp += said and not is_oom
            fn += (not said) and is_oom
            tn += (not said) and not is_oom
            if result.peak_mem_gib:
                errs.append(abs(pred.allocated_gib / result.peak_mem_gib - 1))
        out[mode] = {
            "tp": tp,
            "fp": fp,
            "fn": fn,
            "tn": tn,
            "precision": _ratio(tp, tp + fp),
            "recall": _ratio(tp, tp + fn),
            "median_abs_rel_error_peak": round(statistics.median(errs), 4) if errs else None,
        }
    return out


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 3) if b else None


# --------------------------------------------------------------------------- summary


def summarise(runs: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    def stats(key: str) -> dict[str, Any]:
        vals = [r[key] if r[key] is not None else math.inf for r in runs]
        vals.sort()
        p90 = vals[min(len(vals) - 1, math.ceil(0.9 * len(vals)) - 1)]
        return {
            "median": _num(statistics.median(vals)),
            "p90": _num(p90),
            "mean_of_hits": _num(statistics.mean([v for v in vals if v != math.inf] or [math.inf])),
        }

    pred = {k: sum(r["predicted_oom"][k] for r in runs) for k in ("tp", "fp", "fn")}
    return {
        "runs": len(runs),
        "hit_rate": round(sum(r["trials_to_2pct"] is not None for r in runs) / len(runs), 3),
        "trials_to_2pct": stats("trials_to_2pct"),
        "gpu_s_to_2pct": stats("gpu_s_to_2pct"),
        "launched_mean": round(statistics.mean(r["launched"] for r in runs), 1),
        "gpu_s_total_mean": round(statistics.mean(r["gpu_s_total"] for r in runs), 1),
        "ooms_launched_total": sum(r["ooms_launched"] for r in runs),
        "ooms_launched_mean": round(statistics.mean(r["ooms_launched"] for r in runs), 2),
        "ooms_before_2pct_mean": round(statistics.mean(r["ooms_before_2pct"] for r in runs), 2),
        "impossible_launched_total": sum(r["impossible_launched"] for r in runs),
        "recommended_within_2pct": sum(bool(r["recommended_within"]) for r in runs),
        "predicted_oom": {
            **pred,
            "precision": _ratio(pred["tp"], pred["tp"] + pred["fp"]),
            "recall": _ratio(pred["tp"], pred["tp"] + pred["fn"]),
        },
        "budget": budget,
    }


def _num(x: float) -> float | None:
    return None if x == math.inf else round(x, 2)


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        f"# Replay benchmark: {Path(doc['landscape']).name}",
        "",
        f"Command: `{doc['command']}`",
        "",
        f"Landscape recorded on: {doc['hardware']}. Model: {doc['model']}. Space: "
        f"{doc['space']['name']} ({len(doc['space']['knobs'])} knobs, grid of "
        f"{doc['grid_size']}, {doc['universe_size']} recorded). Best recorded: "
        f"{doc['best']['tokens_per_s']:,.0f} tokens/s with {doc['best']['params']}.",
        f"Seeds: {doc['seeds']}; trial budget per run: {doc['budget']}. Replayed on: "
        f"{doc['ran_on']} at {doc['ran_at']}.",
        "",
        "Trials and simulated GPU-seconds until the best config found is within 2% of the "
        "landscape's best (a run that never gets there counts as infinite: see hit rate).",
        "",
        "| strategy | hit rate | trials median | trials p90 | GPU-s median | GPU-s p90 | OOMs "
        "per run (before 2%) | impossible launched (all runs) | predicted-OOM precision / "
        "recall |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, s in doc["strategies"].items():
        p = s["predicted_oom"]
        pr = (
            f"{_fmt(p['precision'])} / {_fmt(p['recall'])} (tp {p['tp']}, fp {p['fp']}, "
            f"fn {p['fn']})"
            if name.startswith("ours")
            else "-"
        )
        lines.append(
            f"| {name} | {s['hit_rate']:.0%} | {_fmt(s['trials_to_2pct']['median'])} | "
            f"{_fmt(s['trials_to_2pct']['p90'])} | {_fmt(s['gpu_s_to_2pct']['median'])} | "
            f"{_fmt(s['gpu_s_to_2pct']['p90'])} | {s['ooms_launched_mean']:.1f} "
            f"({s['ooms_before_2pct_mean']:.1f}) | "
            f"{s['impossible_launched_total']} | {pr} |"
        )
    acc = doc["acceptance"]
    lines += ["", "Acceptance:", ""]
    lines += [f"- {'PASS' if ok else 'FAIL'}: {text}" for text, ok in acc]
    if doc.get("notes"):
        lines += ["", "Notes:", ""] + [f"- {n}" for n in doc["notes"]]
    off = doc["cost_model_offline"]
    lines += [
        "",
        f"Cost model against every recorded config ({off['configs']} with a peak or an OOM, "
        f"limit {_fmt(off['limit_gib'])} GiB, pruning at mean - {off['z']} sd):",
        "",
        "| model | predicted-OOM precision | recall | tp/fp/fn/tn | median abs error of peak |",
        "| --- | --- | --- | --- | --- |",
    ]
    for mode in ("uncalibrated", "leave_one_out"):
        m = off[mode]
        lines.append(
            f"| {mode} | {_fmt(m['precision'])} | {_fmt(m['recall'])} | "
            f"{m['tp']}/{m['fp']}/{m['fn']}/{m['tn']} | {_fmt(m['median_abs_rel_error_peak'])} |"
        )
    return "\n".join(lines) + "\n"


def _fmt(x: Any) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.3g}" if isinstance(x, float) else str(x)


def notes(doc: dict[str, Any], table: dict[str, TrialResult]) -> list[str]:
    out = []
    if doc["universe_size"] < doc["grid_size"]:
        out.append(
            f"The recording holds {doc['universe_size']} configs of a {doc['grid_size']}-config "
            "grid: every proposal (seeds included) becomes the nearest recorded config not yet "
            "measured, so random search is uniform over the recording (docs/landscape-format.md)."
        )
    if not any(r.failure_class == FailureClass.OOM for r in table.values()):
        out.append(
            "No recorded config ran out of memory, so predicted-OOM precision and recall cannot "
            "be measured on this recording (tests/search measure them on a fake GPU)."
        )
    if "ours-noseed" in doc["strategies"]:
        out.append(
            "ours' first trial is the expert default (bf16, fused attention, compile default, "
            "the largest micro-batch the cost model says fits); ours-noseed is the same search "
            "without any seed, to show what the rules, the cost model and TPE do on their own."
        )
    return out


def acceptance(doc: dict[str, Any]) -> list[tuple[str, bool]]:
    ours, rnd = doc["strategies"].get("ours"), doc["strategies"].get("random")
    out = []
    if ours:
        med = ours["trials_to_2pct"]["median"]
        out.append(
            (
                f"ours: median trials to within 2% = {_fmt(med)} (target <= 8)",
                med is not None and med <= 8,
            )
        )
        out.append(
            (
                f"ours: impossible configs launched = {ours['impossible_launched_total']} "
                "(target 0)",
                ours["impossible_launched_total"] == 0,
            )
        )
    if ours and rnd:
        a, b = ours["gpu_s_to_2pct"]["median"], rnd["gpu_s_to_2pct"]["median"]
        ok = a is not None and (b is None or a <= b / 3)
        out.append((f"ours: median GPU-s {_fmt(a)} vs random {_fmt(b)} (target <= 1/3)", ok))
    out.append(
        (f"landscape has >= 60 configs ({doc['universe_size']})", doc["universe_size"] >= 60)
    )
    return out


# --------------------------------------------------------------------------- main


def run_benchmark(
    landscape_path: str,
    *,
    space_ref: str = "auto",
    seeds: int = 20,
    strategies: list[str] | None = None,
    budget: int | None = None,
    model: str | None = None,
    out_dir: str | None = None,
    command: str | None = None,
    progress: Any = None,
    drop_best: int = 0,
    extra_notes: list[str] | None = None,
) -> dict[str, Any]:
    """Run the benchmark; write replay_<name>.json/.md under out_dir when given.

    drop_best=N removes the N best recorded configs first: a stress test of the search when
    the expert default's neighbourhood does not hold the optimum."""
    landscape = Landscape.load(landscape_path)
    space = auto_space(landscape) if space_ref == "auto" else load_space(space_ref)
    spec = landscape_model(landscape, model)
    target = landscape.target()
    if drop_best:
        ranked = sorted(
            (e for e in landscape.entries if e[1].tokens_per_s),
            key=lambda e: e[1].tokens_per_s or 0.0,
            reverse=True,
        )
        dropped = {id(e) for e in ranked[:drop_best]}
        landscape = Landscape(
            [e for e in landscape.entries if id(e) not in dropped], landscape.meta
        )
    table = universe(landscape, space)
    if not table:
        raise SystemExit("no recorded config lies inside the space; check --space")
    oks = {k: r for k, r in table.items() if r.status == TrialStatus.OK and r.tokens_per_s}
    best_key = max(oks, key=lambda k: oks[k].tokens_per_s or 0)
    best = oks[best_key].tokens_per_s or 0.0
    budget = budget or len(table)
    names = strategies or list(STRATEGIES)
    work = Path(tempfile.mkdtemp(prefix="replay-bench-"))
    template = work / "template.db"
    upgrade_database(f"sqlite:///{template}")
    dispose_engines()
    doc: dict[str, Any] = {
        "command": command or shlex.join(sys.argv),
        "landscape": str(landscape_path),
        "hardware": _hardware(landscape),
        "model": spec.describe(),
        "space": space.model_dump(mode="json", by_alias=True),
        "grid_size": grid_size(space),
        "universe_size": len(table),
        "best": {"params": json.loads(best_key), "tokens_per_s": best},
        "seeds": seeds,
        "budget": budget,
        "ran_on": "CPU (replay: no GPU time is spent)",
        "ran_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "strategies": {},
        "runs": [],
    }
    try:
        for name in names:
            runs = []
            for seed in range(seeds):
                r = run_once(
                    template,
                    work,
                    strategy=name,
                    seed=seed,
                    landscape=landscape,
                    table=table,
                    space=space,
                    model=spec,
                    target=target,
                    budget=budget,
                    best=best,
                )
                runs.append(r)
                if progress:
                    progress(r)
            doc["strategies"][name] = summarise(runs, budget)
            doc["runs"].extend(runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc["cost_model_offline"] = cost_model_offline(table, space, spec, target)
    doc["acceptance"] = acceptance(doc)
    doc["notes"] = notes(doc, table) + list(extra_notes or [])
    if drop_best:
        doc["notes"].append(
            f"Stress test: the {drop_best} best recorded config(s) were removed before the run, "
            "so the target is the best of the rest."
        )
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        stem = "replay_" + Path(landscape_path).stem.removeprefix("landscape_")
        stem += f"_dropbest{drop_best}" if drop_best else ""
        (out / f"{stem}.json").write_text(json.dumps(doc, indent=1, default=str))
        (out / f"{stem}.md").write_text(markdown(doc))
        doc["written"] = [str(out / f"{stem}.json"), str(out / f"{stem}.md")]
    return doc


def _hardware(landscape: Landscape) -> str:
    fp = next((r.fingerprint for _, r in landscape.entries if r.fingerprint), None)
    if fp is None:
        return "unknown (no fingerprint in the landscape)"
    return (
        f"{fp.device_count}x {fp.device_name} (cc {fp.compute_capability}, "
        f"{fp.memory_total_gib} GiB), driver {fp.driver}, CUDA {fp.cuda}, torch {fp.torch}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--landscape", required=True)
    ap.add_argument("--space", default="auto", help="a space file or name; auto: the landscape's")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--budget", type=int, default=None, help="trials per run (default: universe)")
    ap.add_argument("--model", default=None, help="model preset (default: the landscape's)")
    ap.add_argument("--out", default=None, help="write replay_*.json/.md here")
    ap.add_argument("--drop-best", type=int, default=0, help="remove the N best configs first")
    ap.add_argument("--note", action="append", default=[], help="a note for the report")
    args = ap.parse_args(argv)
    doc = run_benchmark(
        args.landscape,
        space_ref=args.space,
        seeds=args.seeds,
        strategies=args.strategies.split(","),
        budget=args.budget,
        model=args.model,
        out_dir=args.out,
        drop_best=args.drop_best,
        extra_notes=args.note,
        command="python bench/replay.py " + shlex.join(argv or sys.argv[1:]),
    )
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
