"""Studies: create, find (by id, id prefix or name), list, status, lease, best trial.

Runs inside the caller's transaction and never commits (see common.py)."""

from __future__ import annotations

import builtins
import datetime as dt
import uuid
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.util import identity_key

from autotuner.options import StudyOptions
from autotuner.storage import reads
from autotuner.storage.common import (
    _fits,
    _rowcount,
    _set,
    db_now,
)
from autotuner.storage.models import Study, StudyStatus
from autotuner.types import utcnow


class StudyRepo:
    """Studies: create, find (by id, id prefix or name), list, status, lease, best trial."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def create(
        self,
        *,
        name: str,
        model_spec: dict[str, Any],
        space: dict[str, Any],
        objective: str = "tokens_per_s",
        max_trials: int | None,
        max_minutes: float | None,
        gpus_per_trial: int = 1,
        sampler: str = "tpe",
        seed: int = 0,
        options: StudyOptions | None = None,
        device_type: str | None = None,
        submit_key: str | None = None,
        submit_digest: str | None = None,
    ) -> Study:
        """A new queued study with a fresh id `st-xxxxxxxx` (and the submit's idempotency key,
        unique: a second study with the same key fails to insert)."""
        _fits("study name", name, 200, "use a shorter name")
        study = Study(
            id=f"st-{uuid.uuid4().hex[:8]}",
            name=name,
            status=StudyStatus.QUEUED.value,
            model_spec=model_spec,
            space=space,
            objective=objective,
            max_trials=max_trials,
            max_minutes=max_minutes,
            gpus_per_trial=gpus_per_trial,
            device_type=device_type,
            sampler=sampler,
            seed=seed,
            options=options or StudyOptions(),
            submit_key=submit_key,
            submit_digest=submit_digest,
            created_at=utcnow(),
        )
        self.session.add(study)
        self.session.flush()
        return study

    def get(self, study_id: str) -> Study | None:
        """The study with this id; else the newest study with this exact name; else the one
        study whose id starts with this prefix (`st-` optional). None if none or ambiguous."""
        found, _ = self._lookup(study_id)
        return found

    def require(self, study_id: str) -> Study:
        """Like get, but raises StudyNotFound with what to do instead of returning None."""
        return reads.require_study(self._run, study_id, Study)

    def _lookup(self, key: str) -> tuple[Study | None, builtins.list[Study]]:
        return reads.find_study(self._run, key, Study)

    def _run(self, query: Any) -> builtins.list[Study]:
        return list(self.session.scalars(query))

    def newest_named(self, name: str) -> Study | None:
        """The newest study with exactly this name (a name may repeat: `tune` reuses its
        default name for each run of one model and space)."""
        return self.session.scalars(
            select(Study).where(Study.name == name).order_by(*_newest_first()).limit(1)
        ).first()

    def by_submit_key(self, key: str) -> tuple[str, str | None] | None:
        """(id, submit digest) of the study created with this idempotency key, or None."""
        row = self.session.execute(
            select(Study.id, Study.submit_digest).where(Study.submit_key == key)
        ).one_or_none()
        return None if row is None else (str(row[0]), row[1])

    def unfinished_ids(self) -> builtins.list[str]:
        """Ids of the queued and running studies, oldest first: what a coordinator adopts."""
        return list(
            self.session.scalars(
                select(Study.id)
                .where(Study.status.in_([StudyStatus.QUEUED.value, StudyStatus.RUNNING.value]))
                .order_by(Study.created_at, Study.id)
            )
        )

    def list(self, *, status: str | None = None, limit: int = 100) -> builtins.list[Study]:
        """Studies, newest first, optionally only those in one status."""
        query = select(Study).order_by(*_newest_first()).limit(limit)
        if status is not None:
            query = query.where(Study.status == StudyStatus(status).value)
        return list(self.session.scalars(query))

    def set_status(
        self, study: Study, status: StudyStatus, *, error_message: str | None = None
    ) -> None:
        """Move the study to `status`: running stamps started_at (first time only); completed,
        cancelled and failed stamp finished_at; back to queued clears finished_at."""
        status = StudyStatus(status)
        now = utcnow()
        values: dict[str, Any] = {"status": status.value}
        if status == StudyStatus.RUNNING:
            if study.started_at is None:
                values["started_at"] = now
            values["finished_at"] = None
        elif status == StudyStatus.QUEUED:
            values["finished_at"] = None
        else:
            values["finished_at"] = now
        if error_message is not None:
            values["error_message"] = error_message
        self.session.execute(
            update(Study)
            .where(Study.id == study.id)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        _set(study, **values)

    def try_acquire(self, study_id: str, owner: str, ttl_s: float) -> bool:
        """Take (or keep) the study's lease for `owner`, for ttl_s seconds from now.

        One atomic conditional UPDATE: it succeeds if nobody holds the lease, the holder's lease
        has expired, or `owner` already holds it. Two coordinators racing: exactly one wins.
        """
        _fits("lease owner", owner, 64, "use a shorter owner id, e.g. host:pid")
        now = db_now(self.session)
        result = self.session.execute(
            update(Study)
            .where(
                Study.id == study_id,
                or_(
                    Study.owner.is_(None),
                    Study.owner == owner,
                    Study.lease_expires_at.is_(None),
                    Study.lease_expires_at < now,
                ),
            )
            .values(owner=owner, lease_expires_at=now + dt.timedelta(seconds=ttl_s))
            .execution_options(synchronize_session=False)
        )
        self._reload_lease(study_id)
        return _rowcount(result) == 1

    def renew(self, study_id: str, owner: str, ttl_s: float) -> bool:
        """Extend the lease `owner` holds; False if another owner has taken it meanwhile.

        An owner whose lease expired can still renew it while nobody else has taken it (its
        trials were not marked lost: nothing was decided without it)."""
        result = self.session.execute(
            update(Study)
            .where(Study.id == study_id, Study.owner == owner)
            .values(lease_expires_at=db_now(self.session) + dt.timedelta(seconds=ttl_s))
            .execution_options(synchronize_session=False)
        )
        self._reload_lease(study_id)
        return _rowcount(result) == 1

    def release(self, study_id: str, owner: str) -> None:
        """Give the lease up (a no-op if `owner` no longer holds it)."""
        self.session.execute(
            update(Study)
            .where(Study.id == study_id, Study.owner == owner)
            .values(owner=None, lease_expires_at=None)
            .execution_options(synchronize_session=False)
        )
        self._reload_lease(study_id)

    def _reload_lease(self, study_id: str) -> None:
        loaded = self.session.identity_map.get(identity_key(Study, study_id))
        if loaded is not None:
            self.session.refresh(loaded, ["owner", "lease_expires_at"])

    def store_live(
        self, study_id: str, recommendation: dict[str, Any] | None, *, owner: str | None
    ) -> None:
        """Store the live recommendation on a study still queued or running; with `owner`,
        only while that coordinator holds the study's lease (else nothing is written)."""
        query = update(Study).where(
            Study.id == study_id,
            Study.status.in_([StudyStatus.QUEUED.value, StudyStatus.RUNNING.value]),
        )
        if owner is not None:
            query = query.where(Study.owner == owner)
        number = recommendation["trial_number"] if recommendation else None
        self.session.execute(
            query.values(best_trial_number=number, recommendation=recommendation).execution_options(
                synchronize_session=False
            )
        )

    def set_best(
        self, study: Study, trial_number: int | None, recommendation: dict[str, Any] | None
    ) -> None:
        """Record the current best trial and the recommendation built from it."""
        values = {"best_trial_number": trial_number, "recommendation": recommendation}
        self.session.execute(
            update(Study)
            .where(Study.id == study.id)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        _set(study, **values)


def _newest_first() -> tuple[Any, ...]:
    return reads.newest_first()
