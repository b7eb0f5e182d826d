"""The study page's charts kept per study, so that a page load reads the trials since the last
one instead of every trial (1.5 s a page at 50,000 trials, and as much again in Chromium).

Per study (the last KEPT_STUDIES viewed, per process; study/versioned.py's VersionedObjects,
which keeps them out of the cyclic collector's reach): the charts of its ended trials up to the
first one running, folded in once (charts.KeptCharts: ended trials do not change where the
charts read them; storage/ended_feed.py says which have ended since), and the charts last
computed with the study's trials version. A page of a study whose version has not moved (a
finished study, always) is served the charts computed before; a new version reads the trials
from the first one not folded, folds those that have ended and adds the rest (the running tail)
to a copy. The result is `charts.chart_data` over every trial (tests/dashboard/
test_charts_kept.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotuner.dashboard.charts import KeptCharts
from autotuner.storage.ended_feed import EndedFeed
from autotuner.study.gc_pause import gc_paused
from autotuner.study.trial_reads import chart_rows
from autotuner.study.versioned import VersionedObjects

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from autotuner.storage.models import Study

# A 50,000-trial study's kept charts: about 80 MiB of Python objects by tracemalloc (its
# points, each knob value's tokens/s, the best-so-far line's pooled values and heap); a few
# studies are looked at at a time.
KEPT_STUDIES = 4
# Per study: its ended trials folded in (the state, kept across versions) and the charts at
# the version last computed (the value), frozen out of the cyclic collector (versioned.py).
KEPT = VersionedObjects(KEPT_STUDIES)


class _Folded:
    """A study's ended trials folded in, and the feed of those that end next."""

    def __init__(self, study_id: str) -> None:
        self.kept = KeptCharts()
        self.ended = EndedFeed(study_id)


def study_charts(s: Session, study: Study, knobs: list[str]) -> dict[str, Any]:
    """The study's charts (`chart_data`'s, before the progress line's ends: charts.ended_line)
    at the trials version read with its row. Shared: callers must not change it."""

    def compute(folded: _Folded) -> dict[str, Any]:
        with gc_paused():
            ended, tail = folded.ended.take(
                s,
                lambda low, _high: chart_rows(s, study.id, knobs, study.options, low),
                _number,
            )
            folded.kept.fold(ended)
            return folded.kept.charts(tail)

    # The candidates depend on the study's options (its memory headroom): new options, or
    # another space's knobs, start over.
    same = (tuple(knobs), study.options)
    return KEPT.follow(s, study, lambda: _Folded(study.id), compute, same)


def _number(row: dict[str, Any]) -> int:
    return int(row["number"])


def forget() -> None:
    """Drop every kept study (tests: a database dropped and made again under one URL)."""
    KEPT.clear()
