"""What the end of a study reads and replays, kept up as its trials end, so the end of the
study reads and replays only its last trials.

The end of a study (lifecycle.StudyLease.finish) reads every trial, recommends, and replays the
cost and throughput models over every measured trial in number order for the evidence
(search/evidence.py). At 50,000 trials the replay alone was seconds of per-config Python (a
Knobs validated, a memory estimate, throughput features, a refit per 25% more trials), and the
read a second. An ended trial's row does not change where the end reads it (its `retried` flag
may, which nothing there reads), and the replay of a trial reads only those before it. So the
coordinator, after each trial it records, reads the trials that ended since (a range of trial
numbers, up to the first one running), feeds them to its replay (search/evidence_replay.py)
and keeps their rows, with the measured configs among them (keyed and grouped, those that fit
at the policy's options); the end reads the trials from there on and feeds those.

The recommendation at the end is the live one (study/live_increment.py) where that follows
from what it keeps, and the knob report ranks the configs kept: no trial is keyed, judged for
memory or grouped twice. The rows are the ones a read of every trial gives, and the
recommendation, its knob report and its evidence the full computation's, key for key
(tests/coordinator/test_end_kept.py).

Each feed reads at most CATCH_UP trials: a coordinator that takes over a long study catches up
over its next trials rather than at once; what it has not caught up by the end is read and
replayed then.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from autotuner.options import StudyOptions
from autotuner.search.evidence_replay import Replay
from autotuner.search.objective import Objective
from autotuner.search.policy import SearchPolicy
from autotuner.storage import trial_rows
from autotuner.storage.ended_feed import EndedFeed
from autotuner.storage.models import Trial
from autotuner.storage.session import Database
from autotuner.study.gc_pause import gc_paused
from autotuner.study.live_increment import LiveBest
from autotuner.study.measurements import (
    ConfigMeasurements,
    keyed_candidates,
    over_memory,
    rank_configs,
    rank_groups,
)
from autotuner.study.recommend import recommend_ranked
from autotuner.study.recommendation import Recommendation

Keyed = list[tuple[str, Trial]]  # (config key, trial): keyed_candidates' measured trials

CATCH_UP = 500  # trials read and replayed per feed: about 0.2 s (at 0.4 ms a trial)


class KeptForEnd:
    """A study's ended rows and evidence replay as its coordinator keeps them (one policy's:
    another policy's replay starts over)."""

    def __init__(self, db: Database, study_id: str) -> None:
        self.db, self.study_id = db, study_id
        self.policy: SearchPolicy | None = None
        self.replay: Replay | None = None
        self.ended = EndedFeed(study_id)  # what the replay was fed: the trials below its low
        self.rows: list[Trial] = []  # every trial numbered below ended.low, by number
        self.keyed: Keyed = []  # of those, keyed_candidates(stopped_early_too=True)
        # Of those, the ones not over_memory at the policy's options, grouped by config in the
        # order of each config's first trial (as rank_groups groups them).
        self.fitting: dict[str, ConfigMeasurements] = {}

    def catch_up(self, policy: SearchPolicy, limit: int = CATCH_UP) -> int:
        """Read and replay the trials that ended since the last feed (at most `limit`, in
        number order, up to the first one running); how many were read."""
        if self.policy is not policy or self.replay is None:
            self._let_go()
            self.policy, self.replay = policy, policy.replay()
        with self.db.read() as s:
            rows, _ = self.ended.take(
                s,
                lambda low, high: trial_rows.ended_rows(s, self.study_id, low, high, limit),
                _number,
            )
        with gc_paused():
            self.replay.feed(rows)
            keyed = keyed_candidates(rows, stopped_early_too=True)
            _group(self.fitting, keyed, policy.options)
        self.keyed += keyed
        self.rows += rows
        return len(rows)

    def end_rows(self, s: Session) -> list[Trial]:
        """Every trial of the study, as trial_rows.end_of_study_rows reads them: the kept
        ones and, read in `s`, the rest."""
        return [*self.rows, *self._rest(s)]

    def _rest(self, s: Session) -> list[Trial]:
        return trial_rows.end_of_study_rows(s, self.study_id, low=self.ended.low)

    def recommend(
        self, s: Session, live: LiveBest, objective: Objective, options: StudyOptions
    ) -> tuple[list[Trial], Recommendation | None, list[ConfigMeasurements]]:
        """Every trial of the study (as `end_rows`), and what recommend_ranked gives over
        them: the recommendation and the configs the knob report ranks. The recommendation
        is `live`'s where it follows from what that keeps (in `s`'s read, as the rows)."""
        rest = self._rest(s)
        trials = [*self.rows, *rest]
        stored = live.current(s, self.study_id, options)
        if stored is None or self.policy is None:
            return (trials, *recommend_ranked(trials, objective, options=options))
        # recommend_ranked's configs: every measured one (stopped early too) that fits.
        keyed = keyed_candidates(rest, stopped_early_too=True)
        if options == self.policy.options:
            fitting = dict(self.fitting)  # kept as it is, should the end be computed again
            _group(fitting, keyed, options)
            ranked = rank_configs(fitting.values())
        else:
            both = [*self.keyed, *keyed]
            ranked = rank_groups([(key, t) for key, t in both if not over_memory(t, options)])
        return trials, Recommendation.model_validate(stored), ranked

    def report(self, policy: SearchPolicy, trials: list[Trial]) -> dict[str, Any]:
        """The policy's evidence over `trials` (every trial of the study, as it ends): the
        replay fed so far, given the rest. Once: what was kept is let go."""
        replay = self.replay if self.policy is policy else None
        self._let_go()
        return policy.report(trials, replay)

    def _let_go(self) -> None:
        self.policy, self.replay, self.rows, self.keyed, self.fitting = None, None, [], [], {}
        self.ended = EndedFeed(self.study_id)


def _number(t: Trial) -> int:
    return t.number


def _group(groups: dict[str, ConfigMeasurements], keyed: Keyed, options: StudyOptions) -> None:
    """Add the keyed trials that fit at `options` to their configs in `groups` (in order, a
    config's new trial in a new ConfigMeasurements: the old one's cached median is of fewer)."""
    for key, t in keyed:
        if over_memory(t, options):
            continue
        old = groups.get(key)
        groups[key] = ConfigMeasurements(key, [*old.trials, t] if old is not None else [t])
