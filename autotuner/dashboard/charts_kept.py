"""The study page's charts kept per study, so that a page load reads the trials since the last
one instead of every trial (1.5 s a page at 50,000 trials, and as much again in Chromium).

Per study (the last KEPT_STUDIES viewed, per process): the charts of its ended trials up to
the first one running, folded in once (charts.KeptCharts: ended trials do not change where the
charts read them), and the charts last computed with the study's trials version. A page of a
study whose version has not moved (a finished study, always) is served the charts computed
before; a new version reads the trials from the first one not folded, folds those that have
ended and adds the rest (the running tail) to a copy. The result is `charts.chart_data` over
every trial (tests/dashboard/test_charts_kept.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from autotuner.dashboard.charts import KeptCharts
from autotuner.storage.trial_rows import trials_version, unfinished_from
from autotuner.study.gc_pause import gc_paused
from autotuner.study.trial_reads import chart_rows

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from autotuner.storage.models import Study

# A 50,000-trial study's kept charts: about 80 MiB of Python objects by tracemalloc (its
# points, each knob value's tokens/s, the best-so-far line's pooled values and heap); a few
# studies are looked at at a time.
KEPT_STUDIES = 4


class _Study:
    def __init__(self, knobs: list[str], options: Any) -> None:
        self.knobs, self.options = knobs, options
        self.lock = threading.Lock()
        self.kept = KeptCharts()
        self.low = 0  # the first trial number not folded in
        self.version: int | None = None  # the trials version `charts` was computed at
        self.charts: dict[str, Any] | None = None


_STUDIES: OrderedDict[tuple[str, str], _Study] = OrderedDict()
_LOCK = threading.Lock()


def _kept(s: Session, study: Study, knobs: list[str]) -> _Study:
    key = (str(s.get_bind().engine.url), study.id)
    with _LOCK:
        kept = _STUDIES.get(key)
        # The candidates depend on the study's options (its memory headroom): new options, or
        # another space's knobs, start over.
        if kept is None or kept.knobs != knobs or kept.options != study.options:
            kept = _STUDIES[key] = _Study(knobs, study.options)
        _STUDIES.move_to_end(key)
        while len(_STUDIES) > KEPT_STUDIES:
            _STUDIES.popitem(last=False)
    return kept


def study_charts(s: Session, study: Study, knobs: list[str]) -> dict[str, Any]:
    """The study's charts (`chart_data`'s, before the progress line's ends: charts.ended_line)
    at the trials version read with its row. Shared: callers must not change it."""
    kept = _kept(s, study, knobs)
    # One reader per study at a time: a second one waits for the first one's answer rather
    # than read and fold the same trials beside it.
    with kept.lock:
        if kept.version == study.trials_version and kept.charts is not None:
            return kept.charts
        high = unfinished_from(s, study.id)
        with gc_paused():
            rows = chart_rows(s, study.id, knobs, study.options, kept.low)
            split = next((i for i, r in enumerate(rows) if r["number"] >= high), len(rows))
            kept.kept.fold(rows[:split])
            if split:
                kept.low = rows[split - 1]["number"] + 1
            charts = kept.kept.charts(rows[split:])
        # Kept as of the version read with the study's row only if no trial was written since
        # (each statement sees what has committed before it).
        if trials_version(s, study.id) == study.trials_version:
            kept.version, kept.charts = study.trials_version, charts
        return charts


def forget() -> None:
    """Drop every kept study (tests: a database dropped and made again under one URL)."""
    with _LOCK:
        _STUDIES.clear()
