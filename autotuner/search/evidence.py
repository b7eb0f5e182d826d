"""Evidence for a recommendation: how accurate the cost and throughput models were, what was
pruned and why.

Read by people deciding whether to trust the recommendation: the cost model's at-launch errors
(replayed, so each is the prediction the search really had), its calibration, how many configs
were pruned as unsupported or as predicted OOM, and the rules learned from failures.

The replay refits the models as the search did, after every measured trial, for the first
EXACT_REPLAY trials; past them, whenever the trials seen have grown by REFIT_GROWTH since the
last refit (each prediction then comes from a model fitted on at least 1/REFIT_GROWTH of the
trials the search had seen). A refit reads every trial seen, so one per trial made the replay
quadratic: minutes at 10,000 trials; this way it is a few full fits (`replay` in the report
says how many). The models learn nothing new late in a long study, so the errors barely move.

Each trial is read from its columns (storage/models.py: the metrics, peaks, memory limit,
failure class) where its result JSON was not loaded, and its knobs rebuilt from its params
where its config was not; the result is read for out-of-memory trials, whose lower bound
(required_mem_gib) is only in the JSON: the caller loads those (study/live.py,
`end_of_study_rows`). A config measured several times is rebuilt, estimated and featurised
once, and the throughput predictions made between two refits are computed in one batch: at
10,000 trials the replay is per-trial bookkeeping, and these cut it by a third.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from autotuner.flops import flops_per_token, param_count
from autotuner.purpose import END_CHECKS
from autotuner.search.costmodel import CostModel, error_summary
from autotuner.search.costmodel.memory import MemoryEstimate
from autotuner.search.costmodel.throughput import ThroughputModel
from autotuner.search.rules import LearnedRules
from autotuner.spec import FailureClass, Knobs, ModelSpec, TrialResult, TrialStatus
from autotuner.storage.models import Trial, TrialState

EXACT_REPLAY = 100  # measured trials replayed with a refit before each prediction
REFIT_GROWTH = 1.25  # past them, a refit each time the trials seen grow by this factor
SHOWN = 200  # the last predictions listed trial by trial

Measured = tuple[int, Knobs, TrialResult]  # (trial number, knobs as it ran, its result)

# The fields of a result the models read, as the trial's columns hold them.
_COLUMNS = (
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "peak_mem_gib",
    "peak_reserved_gib",
    "memory_limit_gib",
)
_BLANK = TrialResult.model_construct(status=TrialStatus.OK, notes=[])  # copied, never changed


def report(
    trials: list[Trial],
    *,
    model: ModelSpec,
    knobs: Callable[[dict[str, Any]], Knobs],
    cost: CostModel,
    throughput: ThroughputModel,
    learned: LearnedRules,
) -> dict[str, Any]:
    """Cost-model accuracy, learned rules and pruning counts of a study's trials."""
    measured = []
    rebuild = _one_per_config(knobs)
    for t in sorted(trials, key=lambda t: t.number):
        if t.state == TrialState.PRUNED or (result := _result(t)) is None:
            continue
        measured.append((t.number, _knobs(t, rebuild), result))  # as it ran
    fresh = CostModel(model, num_gpus=cost.num_gpus, on_cuda=cost.on_cuda, limit_gib=cost.limit_gib)
    errors, memory_fits = _replay_memory(fresh, measured)
    searched = {t.number for t in trials if t.purpose not in END_CHECKS}
    speed_model = ThroughputModel(throughput.model, throughput.target, throughput.num_gpus)
    speed, speed_fits = _replay_throughput(speed_model, [m for m in measured if m[0] in searched])
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    cal = cost.calibration
    return {
        "cost_model": {
            "param_count": param_count(model),
            "flops_per_token": flops_per_token(model),
            "memory_limit_gib": cost.limit_gib,
            "calibration": {
                "measured": cal.measured,
                "fragmentation": round(cal.fragmentation(), 3),
                "fragmentation_by_allocator": {
                    mode: round(cal.fragmentation(mode), 3)
                    for mode in sorted({"default", *cal.reserved_ratios})
                },
                "model_rel_sd": round(cal.rel_sd, 4),
            },
            "errors": error_summary(errors),
            "trials": errors[-SHOWN:],
            "replay": {"refits": memory_fits, "exact_first": EXACT_REPLAY},
            "predicted_oom_pruned": sum(1 for t in pruned if t.error_class == "oom"),
        },
        "throughput_model": {
            "model_rel_sd": round(throughput.rel_sd, 4),
            "errors": error_summary(speed),
            "trials": speed[-SHOWN:],
            "replay": {"refits": speed_fits, "exact_first": EXACT_REPLAY},
        },
        "pruned": {
            "unsupported": sum(1 for t in pruned if t.error_class == "unsupported"),
            "oom": sum(1 for t in pruned if t.error_class == "oom"),
            "headroom": sum(1 for t in pruned if t.error_class == "headroom"),
        },
        "learned_rules": [r.describe() for r in learned.rules],
    }


def _result(t: Trial) -> TrialResult | None:
    """The trial's result: its JSON where loaded, else what the models read of it, from its
    columns (an unfinished or unmeasured trial has none)."""
    if _loaded(t, "result"):
        return TrialResult.model_validate(t.result) if t.result else None
    if t.state == TrialState.RUNNING or t.finished_at is None:
        return None
    if t.error_class == FailureClass.OOM.value:
        raise ValueError(
            f"trial {t.number} ran out of memory: its result (the memory it asked for) is read "
            "from its JSON; load it with the rows (study/live.end_of_study_rows)"
        )
    return _BLANK.model_copy(update={name: getattr(t, name) for name in _COLUMNS})


def _loaded(t: Trial, name: str) -> bool:
    # In memory, not deferred: the instance's dict holds exactly those (study/columns.loaded).
    return name in t.__dict__


def _knobs(t: Trial, rebuild: Callable[[dict[str, Any]], Knobs]) -> Knobs:
    """The knobs the trial ran with: its config's where loaded, else rebuilt from its params
    by the study's space, as the coordinator built them at launch."""
    if _loaded(t, "config"):
        return t.knobs or rebuild(t.params)
    return rebuild(t.params)


Rebuild = Callable[[dict[str, Any]], Knobs]  # a trial's knobs from its params


def _one_per_config(rebuild: Rebuild) -> Rebuild:
    """`rebuild`, once per distinct params (validating Knobs is most of a trial's cost here).
    Trials with equal params share one Knobs object, so the replays below compute a config's
    memory estimate and throughput features once, keyed by that object."""
    built: dict[Any, Knobs] = {}

    def knobs(params: dict[str, Any]) -> Knobs:
        key = tuple(sorted(params.items()))
        try:
            found = built.get(key)
        except TypeError:  # an unhashable value: build it every time
            return rebuild(params)
        if found is None:
            found = built[key] = rebuild(params)
        return found

    return knobs


class _Refits:
    """When the replay refits: after each point while the model has at most EXACT_REPLAY (as
    the search did: the fit starts from the previous one, so this is the same model), then
    before a prediction once its points grew by REFIT_GROWTH since the last refit."""

    def __init__(
        self,
        points: Callable[[], int],
        refit: Callable[[], None],
        before_refit: Callable[[], None] = lambda: None,
    ) -> None:
        self.points, self.refit, self.before_refit = points, refit, before_refit
        self.fitted, self.count = points(), 0  # a fresh model is fitted on its prior

    def _refit(self, n: int) -> None:
        self.before_refit()
        self.refit()
        self.fitted, self.count = n, self.count + 1

    def after_observe(self) -> None:
        if self.fitted < (n := self.points()) <= EXACT_REPLAY:
            self._refit(n)

    def before_prediction(self) -> None:
        if (n := self.points()) > self.fitted and n >= self.fitted * REFIT_GROWTH:
            self._refit(n)


def _replay_memory(cm: CostModel, measured: Sequence[Measured]) -> tuple[list[dict], int]:
    """Each measured trial's memory as predicted before it ran (see the module docstring)."""
    refits = _Refits(lambda: len(cm.calibration.points), cm.calibration.refit)
    out = []
    estimates: dict[int, tuple[MemoryEstimate, np.ndarray]] = {}  # by id(knobs): per config
    for number, knobs, result in measured:
        if not (result.peak_mem_gib and result.tokens_per_s):
            cm.observe(knobs, result, fit=False)  # an OOM's lower bound, or nothing
            refits.after_observe()
            continue
        # Once per config: for the prediction and for the calibration.
        if (found := estimates.get(id(knobs))) is None:
            est = cm.estimate(knobs)
            found = estimates[id(knobs)] = (est, est.vector())
        est, x = found
        refits.before_prediction()
        # The allocated peak as Calibration.predict computes it (x @ beta), without its
        # fragmentation and sd: that takes a median over every trial seen, per call
        # (quadratic over a replay), and the error is of the allocated peak.
        predicted = float(x @ cm.calibration.beta)
        out.append(
            {
                "trial_number": number,
                "predicted_gib": round(predicted, 3),
                "measured_gib": round(result.peak_mem_gib, 3),
                "rel_error": round(predicted / result.peak_mem_gib - 1.0, 4),
            }
        )
        # What CostModel.observe does with a measured peak, with the estimate made above.
        cm.calibration.add_peak(est, result.peak_mem_gib, result.peak_reserved_gib, fit=False)
        refits.after_observe()
    return out, refits.count


def _replay_throughput(tm: ThroughputModel, measured: Sequence[Measured]) -> tuple[list[dict], int]:
    """Each measured search trial's tokens/s as predicted before it ran, with the sd claimed.

    Between two refits the model does not change, so the trials predicted in between are
    predicted together (one `predict_many`), just before the next refit and at the end."""
    out: list[dict] = []
    pending: list[tuple[int, np.ndarray, float]] = []  # (trial number, features, tokens/s)

    def predict_pending() -> None:
        if not pending:
            return
        mean, sd = tm.predict_many(np.array([x for _, x, _ in pending]))
        for (number, _, measured_tps), predicted, claimed in zip(pending, mean, sd, strict=True):
            out.append(
                {
                    "trial_number": number,
                    "predicted_tokens_per_s": round(float(predicted), 1),
                    "predicted_sd": round(float(claimed), 1),
                    "measured_tokens_per_s": round(measured_tps, 1),
                    "rel_error": round(float(predicted) / measured_tps - 1.0, 4),
                }
            )
        pending.clear()

    refits = _Refits(lambda: tm.measured, tm.refit, before_refit=predict_pending)
    features: dict[int, np.ndarray] = {}  # by id(knobs): once per config, not twice per trial
    for number, knobs, result in measured:
        if (x := features.get(id(knobs))) is None:
            x = features[id(knobs)] = tm.features(knobs)
        if result.tokens_per_s and "predicted" not in result.notes:
            refits.before_prediction()
            pending.append((number, x, result.tokens_per_s))
        tm.observe(knobs, result, fit=False, features=x)
        refits.after_observe()
    predict_pending()
    return out, refits.count
