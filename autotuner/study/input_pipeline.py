"""Is the input pipeline the bottleneck? The recommendation's data-starvation diagnosis.

Each trial on loader or file data measures the share of its timed repeats the training loop
spent blocked on the next batch (TrialResult.input_wait_share; NVML's GPU idle share beside it
on a GPU). When the recommended config waits more than INPUT_WAIT_THRESHOLD of its step time,
faster kernels will not make that training run faster: the recommendation says so, and names
the loader settings (workers, pinned memory, prefetch) of the measured config that waited
least, if the study measured one with other loader settings and a lower share. Only measured
settings are named: a guess would be no evidence.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any, Protocol

from autotuner.spec import TrialResult
from autotuner.storage.models import Trial
from autotuner.study.columns import measured

INPUT_WAIT_THRESHOLD = 0.05  # above this share of step time, the GPU waits for data
LOADER_KNOBS = ("loader_workers", "pin_memory", "prefetch_factor")
_SHORT = {"loader_workers": "workers", "pin_memory": "pinned", "prefetch_factor": "prefetch"}


class Measured(Protocol):
    """A config's measurements (study.measurements.ConfigMeasurements)."""

    @property
    def first(self) -> Trial: ...

    @property
    def trials(self) -> list[Trial]: ...

    @property
    def median(self) -> float: ...

    @property
    def results(self) -> list[TrialResult]: ...


def input_pipeline_entry(
    best: Measured, ranked: Sequence[Measured], default: Measured | None = None
) -> dict[str, Any] | None:
    """The diagnosis for the recommended config, or None when it measured no input pipeline
    (synthetic data). `default`: the expert default's measurements, if measured; when it was
    starved and the winner is not, the entry says so: the winner's loader settings are the
    measured fix."""
    share = _median([r.input_wait_share for r in best.results])
    if share is None:
        return None
    idle = _median([r.gpu_idle_share for r in best.results])
    settings = loader_settings(best.first)
    entry: dict[str, Any] = {
        "input_wait_share": share,
        "gpu_idle_share": idle,
        "threshold": INPUT_WAIT_THRESHOLD,
        "bottleneck": share > INPUT_WAIT_THRESHOLD,
        "loader_settings": settings,
        "fix": None,
    }
    idle_text = "" if idle is None else f", GPU idle {idle:.0%}"
    if not entry["bottleneck"]:
        entry["text"] = f"not the bottleneck: {share:.1%} of step time waiting for data{idle_text}"
        if (starved := _starved_default(best, default)) is not None:
            entry["default"] = starved
            entry["text"] += f"; {starved['text']}"
        return entry
    waiting = f"{share:.0%} of step time waiting for data{idle_text}"
    text = f"the bottleneck: {waiting} ({_describe(settings)})"
    fix = _best_fix(best, ranked, share)
    if fix is None:
        text += "; no measured loader setting waited less: search the loader knobs"
    else:
        group, fix_share = fix
        fix_settings = loader_settings(group.first)
        verb = "removed it" if fix_share <= INPUT_WAIT_THRESHOLD else "reduced it"
        entry["fix"] = {
            "trial_number": group.first.number,
            "input_wait_share": fix_share,
            "loader_settings": fix_settings,
        }
        text += f"; {_describe(fix_settings)} {verb}: {fix_share:.1%} (trial #{group.first.number})"
    entry["text"] = text
    return entry


def _starved_default(best: Measured, default: Measured | None) -> dict[str, Any] | None:
    """The expert default's input wait, when it starved and had other loader settings than
    the winner: then those settings are what fixed it, measured."""
    if default is None or default is best:
        return None
    share = _median([r.input_wait_share for r in default.results])
    settings = loader_settings(default.first)
    if share is None or share <= INPUT_WAIT_THRESHOLD or settings == loader_settings(best.first):
        return None
    idle = _median([r.gpu_idle_share for r in default.results])
    idle_text = "" if idle is None else f", GPU idle {idle:.0%}"
    number = default.first.number
    return {
        "trial_number": number,
        "input_wait_share": share,
        "gpu_idle_share": idle,
        "loader_settings": settings,
        "text": (
            f"at the default loader settings ({_describe(settings)}, trial #{number}) it was "
            f"the bottleneck, {share:.0%} of step time waiting for data{idle_text}: these "
            "loader settings removed it"
        ),
    }


def loader_settings(trial: Trial) -> dict[str, Any]:
    knobs = (trial.config or {}).get("knobs", {})
    return _effective({name: knobs[name] for name in LOADER_KNOBS if name in knobs})


def _effective(settings: dict[str, Any]) -> dict[str, Any]:
    """Without loader workers the training loop reads each batch itself: there is nothing to
    prefetch, so prefetch_factor changes nothing (DataLoader ignores it) and is left out, and
    two configs that differ only in it have the same loader."""
    if settings.get("loader_workers") == 0:
        return {k: v for k, v in settings.items() if k != "prefetch_factor"}
    return settings


def _best_fix(
    best: Measured, ranked: Sequence[Measured], share: float
) -> tuple[Measured, float] | None:
    """The measured config with other loader settings that waited least (below `share`);
    of equal shares, the faster one. Read from columns (the shares) and params (the searched
    loader knobs: a fixed one is the same in every trial), not from every config's JSON."""
    workers = loader_settings(best.first).get("loader_workers")
    own = _searched_loader(best.first, workers)
    found = []
    for group in ranked:
        other = _median([measured(t, "input_wait_share") for t in group.trials])
        if group is best or other is None or other >= share:
            continue
        if _searched_loader(group.first, workers) != own:  # the same loader fixes nothing
            found.append((group, other))
    return min(found, key=lambda f: (f[1], -f[0].median), default=None)


def _searched_loader(trial: Trial, workers: Any) -> dict[str, Any]:
    """The trial's searched loader knobs that take effect; `workers`: the recommended config's
    loader_workers, the same in every trial when it is fixed rather than searched."""
    params = {name: trial.params[name] for name in LOADER_KNOBS if name in trial.params}
    effective = _effective({"loader_workers": workers, **params})
    return {k: v for k, v in effective.items() if k in params}


def _describe(settings: dict[str, Any]) -> str:
    parts = []
    for name, value in settings.items():
        if isinstance(value, bool):
            parts.append(_SHORT[name] if value else f"no {_SHORT[name]}")
        else:
            parts.append(f"{_SHORT.get(name, name)}={value}")
    return ", ".join(parts) or "default loader settings"


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(statistics.median(present)) if present else None
