"""The cost and throughput models replayed over a study's trials, in trial-number order: each
measured trial's memory and tokens/s as predicted before it ran (search/evidence.py reports
them).

The replay refits the models as the search did, after every measured trial, for the first
EXACT_REPLAY trials; past them, whenever the trials seen have grown by REFIT_GROWTH since the
last refit (each prediction then comes from a model fitted on at least 1/REFIT_GROWTH of the
trials the search had seen). A refit reads every trial seen, so one per trial made the replay
quadratic: minutes at 10,000 trials; this way it is a few full fits (`replay` in the report
says how many). The models learn nothing new late in a long study, so the errors barely move.

A `Replay` is fed trials in number order and may be fed as they end (study/end_kept.py
keeps one up with a running study): an ended trial does not change, and the replay of a
trial reads only the trials before it, so feeding it in parts computes exactly what one pass
over every trial does. At 50,000 trials that pass is seconds of per-config Python (a memory
estimate, throughput features, a Knobs validated), too long for the end of a study.

Each trial is read from its columns (storage/tables.py: the metrics, peaks, memory limit,
failure class) where its result JSON was not loaded, and its knobs rebuilt from its params
where its config was not; the result is read for out-of-memory trials, whose lower bound
(required_mem_gib) is only in the JSON: the caller loads those (storage/trial_rows.py). A
config measured several times is rebuilt, estimated and featurised once, and the throughput
predictions made between two refits are computed in one batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from autotuner.purpose import END_CHECKS
from autotuner.search.costmodel import CostModel
from autotuner.search.costmodel.memory import MemoryEstimate
from autotuner.search.costmodel.throughput import ThroughputModel
from autotuner.search.memory_history import Carried
from autotuner.spec import FailureClass, Knobs, ModelSpec, TrialResult, TrialStatus
from autotuner.storage.models import Trial, TrialState

EXACT_REPLAY = 100  # measured trials replayed with a refit before each prediction
REFIT_GROWTH = 1.25  # past them, a refit each time the trials seen grow by this factor

Measured = tuple[int, Knobs, TrialResult]  # (trial number, knobs as it ran, its result)
Rebuild = Callable[[dict[str, Any]], Knobs]  # a trial's knobs from its params

# The fields of a result the models read, as the trial's columns hold them.
_COLUMNS = (
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "peak_mem_gib",
    "peak_reserved_gib",
    "memory_limit_gib",
)
_BLANK = TrialResult.model_construct(status=TrialStatus.OK, notes=[])  # copied, never changed


class Replay:
    """Both models' replay over the trials fed so far (numbered below `next`)."""

    def __init__(
        self,
        *,
        model: ModelSpec,
        knobs: Rebuild,
        cost: CostModel,
        throughput: ThroughputModel,
    ) -> None:
        # What the replay was started from: a report for other models replays afresh.
        self.settings = settings(model, cost, throughput)
        self.rebuild = _one_per_config(knobs)
        self.memory = MemoryReplay(
            CostModel(
                model, num_gpus=cost.num_gpus, on_cuda=cost.on_cuda, limit_gib=cost.limit_gib
            ),
            carried=cost.carried,
        )
        self.speed = ThroughputReplay(
            ThroughputModel(throughput.model, throughput.target, throughput.num_gpus)
        )
        self.next = 0  # the trials numbered below were fed
        self.ended = False

    def feed(self, trials: Iterable[Trial]) -> None:
        """The trials numbered `next` or above, ended ones, in number order (those below
        `next` were fed already and are passed over)."""
        if self.ended:
            raise RuntimeError("the replay's predictions were taken: it takes no more trials")
        for t in trials:
            if t.number < self.next:
                continue
            self.next = t.number + 1
            if t.state == TrialState.PRUNED or (result := _result(t)) is None:
                continue
            measured = (t.number, _knobs(t, self.rebuild), result)  # as it ran
            self.memory.add(*measured)
            if t.purpose not in END_CHECKS:  # the throughput model learns from the search's
                self.speed.add(*measured)

    def predictions(self) -> tuple[tuple[list[dict], int], tuple[list[dict], int]]:
        """(memory errors, refits), (throughput errors, refits): the replay's result; it
        takes no more trials after."""
        self.ended = True
        return self.memory.result(), self.speed.result()


def settings(model: ModelSpec, cost: CostModel, throughput: ThroughputModel) -> tuple[Any, ...]:
    """What a replay's fresh models are built from."""
    return (
        model,
        cost.num_gpus,
        cost.on_cuda,
        cost.limit_gib,
        tuple((c.study_id, c.number) for c in cost.carried),
        throughput.target,
        throughput.num_gpus,
    )


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


def _knobs(t: Trial, rebuild: Rebuild) -> Knobs:
    """The knobs the trial ran with: its config's where loaded, else rebuilt from its params
    by the study's space, as the coordinator built them at launch."""
    if _loaded(t, "config"):
        return t.knobs or rebuild(t.params)
    return rebuild(t.params)


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


class MemoryReplay:
    """Each measured trial's memory as predicted before it ran (see the module docstring)."""

    def __init__(self, cm: CostModel, carried: Sequence[Carried] = ()) -> None:
        """`carried`: the earlier studies' evidence the search's model started from
        (search/memory_history.py), learnt first, as the search did before its first trial."""
        self.cm = cm
        cm.carry(carried)
        # Counted from the study's own trials: the search refitted after each of its first
        # EXACT_REPLAY, whatever it had carried.
        start = len(cm.calibration.points)
        self.refits = _Refits(lambda: len(cm.calibration.points) - start, cm.calibration.refit)
        self.out: list[dict] = []
        # By id(knobs), per config: for the prediction and for the calibration. Each holds its
        # knobs, so no id is reused while the replay lives (a trial's knobs read from its
        # config are an object of their own, dropped once the trial is replayed).
        self.estimates: dict[int, tuple[Knobs, MemoryEstimate, np.ndarray]] = {}

    def add(self, number: int, knobs: Knobs, result: TrialResult) -> None:
        cm = self.cm
        if not (result.peak_mem_gib and result.tokens_per_s):
            cm.observe(knobs, result, fit=False)  # an OOM's lower bound, or nothing
            self.refits.after_observe()
            return
        if (found := self.estimates.get(id(knobs))) is None:
            est = cm.estimate(knobs)
            found = self.estimates[id(knobs)] = (knobs, est, est.vector())
        _, est, x = found
        self.refits.before_prediction()
        # The allocated peak as Calibration.predict computes it (x @ beta), without its
        # fragmentation and sd: that takes a median over every trial seen, per call
        # (quadratic over a replay), and the error is of the allocated peak.
        predicted = float(x @ cm.calibration.beta)
        # The peak the model is fitted on: a CUDA graph's pool is not in the allocated peak.
        peak = cm.fitted_peak_gib(knobs, result)
        self.out.append(
            {
                "trial_number": number,
                "predicted_gib": round(predicted, 3),
                "measured_gib": round(peak, 3),
                "rel_error": round(predicted / peak - 1.0, 4),
            }
        )
        # As the search learnt it (a CUDA-graph trial's peak is its reserved one), with the
        # estimate made above.
        cm.observe(knobs, result, fit=False, est=est)
        self.refits.after_observe()

    def result(self) -> tuple[list[dict], int]:
        return self.out, self.refits.count


class ThroughputReplay:
    """Each measured search trial's tokens/s as predicted before it ran, with the sd claimed.

    Between two refits the model does not change, so the trials predicted in between are
    predicted together (one `predict_many`), just before the next refit and at the end."""

    def __init__(self, tm: ThroughputModel) -> None:
        self.tm = tm
        self.out: list[dict] = []
        self.pending: list[tuple[int, np.ndarray, float]] = []  # (number, features, tokens/s)
        self.refits = _Refits(lambda: tm.measured, tm.refit, before_refit=self._predict_pending)
        # By id(knobs), with the knobs (as MemoryReplay.estimates): once per config.
        self.features: dict[int, tuple[Knobs, np.ndarray]] = {}

    def add(self, number: int, knobs: Knobs, result: TrialResult) -> None:
        if (found := self.features.get(id(knobs))) is None:
            found = self.features[id(knobs)] = (knobs, self.tm.features(knobs))
        x = found[1]
        if result.tokens_per_s and "predicted" not in result.notes:
            self.refits.before_prediction()
            self.pending.append((number, x, result.tokens_per_s))
        self.tm.observe(knobs, result, fit=False, features=x)
        self.refits.after_observe()

    def _predict_pending(self) -> None:
        if not self.pending:
            return
        mean, sd = self.tm.predict_many(np.array([x for _, x, _ in self.pending]))
        for (number, _, measured_tps), predicted, claimed in zip(
            self.pending, mean, sd, strict=True
        ):
            self.out.append(
                {
                    "trial_number": number,
                    "predicted_tokens_per_s": round(float(predicted), 1),
                    "predicted_sd": round(float(claimed), 1),
                    "measured_tokens_per_s": round(measured_tps, 1),
                    "rel_error": round(float(predicted) / measured_tps - 1.0, 4),
                }
            )
        self.pending.clear()

    def result(self) -> tuple[list[dict], int]:
        self._predict_pending()
        return self.out, self.refits.count


def replay_memory(cm: CostModel, measured: Sequence[Measured]) -> tuple[list[dict], int]:
    """MemoryReplay over `measured` at once."""
    replay = MemoryReplay(cm)
    for m in measured:
        replay.add(*m)
    return replay.result()


def replay_throughput(tm: ThroughputModel, measured: Sequence[Measured]) -> tuple[list[dict], int]:
    """ThroughputReplay over `measured` at once."""
    replay = ThroughputReplay(tm)
    for m in measured:
        replay.add(*m)
    return replay.result()
