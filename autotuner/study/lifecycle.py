"""A study's life in the database: the lease, heartbeats, a cancel, and its end.

One coordinator writes a study at a time. It holds the study row's lease (`owner`,
`lease_expires_at`), renews it with its running trials' heartbeats, and releases it when the
study completes, is cancelled or fails. Taking the lease makes every trial still marked running
an orphan of a dead coordinator: `StudyLease.take` marks them lost in the same transaction.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotuner.options import StudyOptions
from autotuner.search.objective import Objective
from autotuner.search.space import SearchSpace
from autotuner.spec import ModelSpec
from autotuner.status import ENDED_STATUSES
from autotuner.storage import trial_rows
from autotuner.storage.common import LeaseLost
from autotuner.storage.models import Study, StudyStatus, Trial, TrialState
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.events import Event, OnEvent
from autotuner.study.gc_pause import gc_paused
from autotuner.study.live import end_of_study_rows
from autotuner.study.live_increment import LiveBest
from autotuner.study.lost import charge_crash_loops
from autotuner.study.recommend import knob_importance, recommend_ranked

if TYPE_CHECKING:  # end_kept imports the search policy, which the CLI's reads do not need
    from sqlalchemy.orm import Session

    from autotuner.study.end_kept import KeptForEnd


def default_owner() -> str:
    """A lease owner id unique to this process: host, pid and a random suffix."""
    # The lease column holds 64 characters: keep the hostname part short.
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class StudySettings:
    """What the study row says, read once when the lease is taken."""

    space: SearchSpace
    model: ModelSpec
    objective: Objective
    max_trials: int | None
    max_minutes: float | None
    gpus_per_trial: int
    options: StudyOptions
    sampler: str
    seed: int
    over: bool  # completed, cancelled or failed: nothing left to run
    started_at: dt.datetime
    created_at: dt.datetime  # what "earlier" means for earlier studies' evidence
    device_type: str | None  # what the trials were last known to run on: cuda, cpu
    seeds: dict[str, Any] | None = None  # the seed plan stored at the start (hold_seeds)
    paused_s: float = 0.0  # seconds waited for the cluster or GPUs so far (study/pause.py)
    waiting: str | None = None  # why it waited when its last coordinator stopped


class StudyLease:
    """The study row as its single writer sees it: take, keep, finish, fail, release."""

    def __init__(
        self,
        db: Database,
        study_id: str,
        owner: str,
        *,
        ttl_s: float,
        heartbeat_interval_s: float,
        on_event: OnEvent,
    ) -> None:
        self.db = db
        self.study_id = study_id
        self.owner = owner
        self.ttl_s = ttl_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.on_event = on_event
        self._last_heartbeat = 0.0
        self.live = LiveBest(db)

    def take(self) -> StudySettings:
        """Take the lease and read the study; unless it is over, mark it running and its
        orphaned trials lost (we hold the lease, so their owner is dead)."""
        with self.db.session() as s:
            studies = StudyRepo(s)
            if not studies.try_acquire(self.study_id, self.owner, self.ttl_s):
                raise RuntimeError(
                    f"study {self.study_id} is being run by another coordinator; "
                    f"wait for its lease to expire ({self.ttl_s:.0f} s) or cancel it"
                )
            study = studies.require(self.study_id)
            self.live.forget()  # another coordinator may have run it since: read it all
            over = study.status in ENDED_STATUSES
            if not over:
                if study.status == StudyStatus.QUEUED:
                    studies.set_status(study, StudyStatus.RUNNING)
                self._lose_running(s)
            return StudySettings(
                space=SearchSpace.model_validate(study.space),
                model=ModelSpec.model_validate(study.model_spec),
                objective=Objective(study.objective),
                max_trials=study.max_trials,
                max_minutes=study.max_minutes,
                gpus_per_trial=study.gpus_per_trial,
                options=study.options,
                sampler=study.sampler,
                seed=study.seed,
                over=over,
                started_at=study.started_at or dt.datetime.now(dt.UTC),
                created_at=study.created_at,
                device_type=study.device_type,
                seeds=study.seeds,
                paused_s=study.paused_s or 0.0,
                waiting=study.waiting,
            )

    def _lose_running(self, s: Session) -> None:
        """Mark the study's running trials lost: whoever ran them is gone (a dead coordinator
        at takeover) or is going (`hand_over`)."""
        far_future = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
        trials = TrialRepo(s)
        lost = trials.mark_lost(self.study_id, heartbeat_older_than=far_future)
        # Each is run again without spending its config's retry, unless its config was lost
        # too often in a row: then it is a crash (study/lost.py).
        charge_crash_loops(lost, lambda n: trials.get(self.study_id, n))
        for trial in lost:
            self.on_event(Event("lost", trial.number, trial.params, TrialState(trial.state)))

    def hand_over(self, waiting: str | None, paused_s: float) -> bool:
        """Give the study to whichever coordinator starts next, at once (a service that exits
        for its supervisor to restart it: `serve --exit-after-raylet-lost`): its running
        trials lost, as a takeover would mark them, the study left running with why it waits
        and the seconds waited so far, the lease given back, in one transaction. Unlike
        `interrupt`, nobody has to resume it. False where we no longer hold it."""
        with self.db.session() as s:
            studies = StudyRepo(s)
            study = s.get(Study, self.study_id, with_for_update=True, populate_existing=True)
            if study is None or study.owner != self.owner:
                return False
            if study.status not in ENDED_STATUSES:
                self._lose_running(s)
                study.waiting, study.paused_s = waiting, paused_s
            studies.release(self.study_id, self.owner)
            return True

    def hold_space(self, space: SearchSpace) -> None:
        """Store the study's space as the coordinator settled it at the start (the global
        batch taken from the expert default), so a restart runs the same one. Fenced by the
        lease like every write."""
        self._set(space=space.model_dump(mode="json", by_alias=True))

    def hold_seeds(self, plan: dict[str, Any]) -> None:
        """Store the seed plan as the coordinator made it at the start, so a restart queues
        the seeds that had not run (and knows the expert default's config). Fenced by the
        lease like every write."""
        self._set(seeds=plan)

    def record_device(self, device_type: str) -> None:
        """Store what the trials run on (`cuda` or `cpu`): the study page says "trials on the
        CPU" or "N GPUs per trial" before any trial has reported, and the list filters on it."""
        self._set(device_type=device_type)

    def set_waiting(self, reason: str | None, paused_s: float) -> None:
        """Store why the study launches nothing now (None: it launches again) and the seconds
        it has waited so far (study/pause.py). Fenced by the lease like every write."""
        self._set(waiting=reason, paused_s=paused_s)

    def _set(self, **columns: Any) -> None:
        """Write these columns of the study row while we hold its lease."""
        with self.db.session() as s:
            study = StudyRepo(s).require(self.study_id)
            if study.owner != self.owner:
                raise LeaseLost(f"study {self.study_id} is held by {study.owner}, not by us")
            for name, value in columns.items():
                setattr(study, name, value)

    def keep_alive(self, running_trial_ids: list[int]) -> None:
        """At most once per heartbeat interval: beat the running trials, renew the lease."""
        now = time.monotonic()
        if now - self._last_heartbeat < self.heartbeat_interval_s:
            return
        self._last_heartbeat = now
        with self.db.session() as s:
            if running_trial_ids:
                TrialRepo(s).heartbeat(running_trial_ids)
            if not StudyRepo(s).renew(self.study_id, self.owner, self.ttl_s):
                raise RuntimeError(
                    f"lost the lease on study {self.study_id} to another coordinator"
                )

    def cancel_requested(self) -> bool:
        with self.db.session() as s:
            study = s.get(Study, self.study_id)
            return study is not None and study.status == StudyStatus.CANCELLED

    def interrupt(self, why: str) -> bool:
        """Stop the study for now (`why`: "interrupted by SIGINT"): its running trials lost
        as interrupted (a resume runs each again), the study `interrupted`, the lease given
        back, in one transaction. False where we no longer hold it or it has ended: nothing
        is written then."""
        with self.db.session() as s:
            studies = StudyRepo(s)
            study = s.get(Study, self.study_id, with_for_update=True, populate_existing=True)
            if study is None or study.owner != self.owner:
                return False
            if study.status in ENDED_STATUSES:
                studies.release(self.study_id, self.owner)
                return False
            far_future = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
            TrialRepo(s).mark_lost(self.study_id, heartbeat_older_than=far_future, reason=why)
            study.waiting = None
            studies.set_status(study, StudyStatus.INTERRUPTED, error_message=why)
            studies.release(self.study_id, self.owner)
            return True

    def fail(self, message: str) -> None:
        """Mark the study failed with `message` and release the lease."""
        with self.db.session() as s:
            studies = StudyRepo(s)
            study = studies.require(self.study_id)
            study.waiting = None
            studies.set_status(study, StudyStatus.FAILED, error_message=message)
            studies.release(self.study_id, self.owner)

    def finish(
        self,
        status: StudyStatus,
        *,
        objective: Objective,
        options: StudyOptions,
        evidence: Callable[[list[Trial]], dict[str, Any]],
        kept: KeptForEnd | None = None,
    ) -> None:
        """Store the recommendation (with `evidence(trials)`), set `status` (a cancel stays a
        cancel) and release the lease.

        The trials are read in one read-only transaction, their JSON only where it is needed
        (`live.end_of_study_rows`), and the recommendation computed there (the winner's JSON
        is read on demand). `kept`: what the coordinator kept as the trials ended
        (study/end_kept.py), its rows and keys, and the live recommendation where it follows
        from what that keeps; the rest is read. Its evidence (the knob report, the models'
        replay) is computed with no transaction open; the write is one short
        transaction, fenced by the lease. All of it with the cyclic garbage collector paused
        (study/gc_pause.py)."""
        with gc_paused():
            # Kept rows read what they lack (the winner's JSON) through this read.
            with self.db.read() as s, trial_rows.reading_in(s):
                if kept is None:
                    trials = end_of_study_rows(s, self.study_id)
                    rec, ranked = recommend_ranked(trials, objective, options=options)
                else:
                    trials, rec, ranked = kept.recommend(s, self.live, objective, options)
            if rec is not None:
                importance = knob_importance(ranked, rec.noise_rel)
                # A check still to come, as the study ends, never runs.
                rec = rec.with_entries(importance=importance, **evidence(trials)).as_ended()
        with self.db.session() as s:
            studies = StudyRepo(s)
            study = studies.require(self.study_id)
            studies.set_best(
                study, rec.trial_number if rec else None, rec.stored() if rec else None
            )
            study.waiting = None  # an ended study waits for nothing
            if study.status != StudyStatus.CANCELLED or status == StudyStatus.CANCELLED:
                studies.set_status(study, status)
            studies.release(self.study_id, self.owner)

    def store_live_best(self, objective: Objective, options: StudyOptions) -> None:
        """The recommendation as the trials stand now, stored for readers: kept up to date
        one finished trial at a time (study/live_increment.py), the same as computed from
        every trial (study/live.py)."""
        self.live.store(self.study_id, objective, options, owner=self.owner)
