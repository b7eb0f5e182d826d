"""Repositories: the queries and state changes on studies and trials, over a caller's Session.

Each method runs inside the caller's `Database.session()` transaction and never commits itself,
so one state change is one transaction. State changes that can race (taking a study's lease,
numbering trials, finishing a trial, marking trials lost) are conditional UPDATEs or row locks,
correct with several coordinators on one Postgres database; on SQLite every transaction takes
the write lock at BEGIN (see session.configure_sqlite), which serialises them.
"""

from __future__ import annotations

import builtins
import datetime as dt
import logging
import math
import uuid
from collections.abc import Sequence
from typing import Any, cast

from pydantic import BaseModel, ValidationError
from sqlalchemy import CursorResult, Select, func, or_, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key

from autotuner.options import StudyOptions
from autotuner.spec import Fingerprint
from autotuner.storage.models import Study, StudyStatus, Trial, TrialState, utcnow

log = logging.getLogger(__name__)

_MIN_PREFIX = 4  # like git: shorter abbreviations are too likely to be ambiguous
_LIST_HINT = "run `autotuner status` to list studies"
_METRICS = ("tokens_per_s", "tokens_per_s_per_gpu", "mfu", "peak_mem_gib", "compile_s")


class StudyNotFound(LookupError):
    """No study matches the id, id prefix or name given; the message says how to find one."""


class LeaseLost(RuntimeError):
    """A coordinator wrote to a study whose lease it no longer holds; nothing was written."""


def db_now(session: Session) -> dt.datetime:
    """The database's clock (Postgres `now()`), so that every coordinator compares lease and
    heartbeat times on one clock, whatever its own says. SQLite is a local file: its clock is
    this machine's."""
    if session.get_bind().dialect.name == "postgresql":
        value = session.scalar(select(func.now()))
        if value is not None:
            return value.astimezone(dt.UTC)
    return utcnow()


class TrialAlreadyFinished(RuntimeError):
    """A trial can be finished (or marked lost) once: a second result is refused, not recorded."""


def _fits(field: str, value: str | None, limit: int, remedy: str) -> None:
    """Refuse a value longer than its column on every backend (SQLite would silently keep it,
    Postgres would fail mid-transaction with a bare "value too long")."""
    if value is not None and len(value) > limit:
        raise ValueError(
            f"{field} {value[:40]!r}... is {len(value)} characters, over {limit}; {remedy}"
        )


def _set(obj: Any, **values: Any) -> None:
    """Mirror values already written by an UPDATE onto a loaded object, without marking it dirty."""
    for key, value in values.items():
        set_committed_value(obj, key, value)


def _rowcount(result: Any) -> int:
    return cast(CursorResult[Any], result).rowcount


def _finite(value: Any) -> float | None:
    """A metric as stored: NaN or infinite is no measurement (and would sort above every number)."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


# --------------------------------------------------------------------------- studies


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
    ) -> Study:
        """A new queued study with a fresh id `st-xxxxxxxx`."""
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
            sampler=sampler,
            seed=seed,
            options=options or StudyOptions(),
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
        found, candidates = self._lookup(study_id)
        if found is not None:
            return found
        if len(candidates) > 1:
            shown = ", ".join(s.id for s in candidates[:5])
            raise StudyNotFound(
                f"study prefix {study_id!r} is ambiguous ({shown}"
                f"{', ...' if len(candidates) > 5 else ''}); give more characters of the id"
            )
        raise StudyNotFound(f"no study with id, id prefix or name {study_id!r}; {_LIST_HINT}")

    def _lookup(self, key: str) -> tuple[Study | None, builtins.list[Study]]:
        key = key.strip()
        if not key:
            return None, []
        exact = self.session.get(Study, key)
        if exact is not None:
            return exact, [exact]
        named = self.session.scalars(
            select(Study).where(Study.name == key).order_by(*_newest_first()).limit(1)
        ).first()
        if named is not None:
            return named, [named]
        prefix = key if key.startswith("st-") else f"st-{key}"
        if len(prefix) - len("st-") < _MIN_PREFIX:
            return None, []
        candidates = list(
            self.session.scalars(
                select(Study).where(Study.id.startswith(prefix, autoescape=True)).limit(6)
            )
        )
        return (candidates[0] if len(candidates) == 1 else None), candidates

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
    return (Study.created_at.desc(), Study.id.desc())


# --------------------------------------------------------------------------- trials


class TrialRepo:
    """Trials of a study: numbered, started, finished once, heartbeated, marked lost."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def create_running(
        self,
        study_id: str,
        *,
        params: dict[str, Any],
        config: dict[str, Any],
        purpose: str = "search",
        retry_of: int | None = None,
        attempt: int = 1,
        worker: str | None = None,
        owner: str | None = None,
    ) -> Trial:
        """A dispatched trial with the study's next number; started and heartbeat now.

        With `owner`, the write happens only while that coordinator holds the study's lease
        (else LeaseLost): a coordinator that lost its study launches nothing more."""
        now = db_now(self.session)
        return self._create(
            study_id,
            owner=owner,
            state=TrialState.RUNNING,
            params=params,
            config=config,
            purpose=purpose,
            retry_of=retry_of,
            attempt=attempt,
            worker=worker,
            started_at=now,
            heartbeat_at=now,
        )

    def create_pruned(
        self,
        study_id: str,
        *,
        params: dict[str, Any],
        config: dict[str, Any],
        error_class: str,
        error_message: str,
        owner: str | None = None,
    ) -> Trial:
        """A trial ruled out before launch: recorded as pruned, finished at once."""
        return self._create(
            study_id,
            owner=owner,
            state=TrialState.PRUNED,
            params=params,
            config=config,
            error_class=error_class,
            error_message=error_message,
            finished_at=utcnow(),
        )

    def _create(
        self, study_id: str, *, state: TrialState, owner: str | None = None, **fields: Any
    ) -> Trial:
        # Lock the study row so concurrent creators take numbers one after another: the second
        # waits here until the first commits, then sees its trial in max(number). SQLite ignores
        # FOR UPDATE; its BEGIN IMMEDIATE already serialises writers.
        locked = self.session.execute(
            select(Study.id, Study.owner).where(Study.id == study_id).with_for_update()
        ).first()
        if locked is None:
            raise StudyNotFound(f"no study with id {study_id!r}; {_LIST_HINT}")
        _check_owner(study_id, locked.owner, owner)
        last = self.session.scalar(select(func.max(Trial.number)).where(Trial.study_id == study_id))
        _fits("worker", fields.get("worker"), 200, "use a shorter worker name")
        _fits("purpose", fields.get("purpose"), 16, "use search, seed or remeasure")
        fields.setdefault("purpose", "search")
        fields.setdefault("attempt", 1)
        trial = Trial(
            study_id=study_id,
            number=0 if last is None else last + 1,
            state=state.value,
            created_at=utcnow(),
            retried=False,
            **fields,
        )
        self.session.add(trial)
        self.session.flush()
        return trial

    def finish(
        self,
        trial: Trial,
        state: TrialState,
        *,
        result: dict[str, Any] | BaseModel | None = None,
        objective_value: float | None = None,
        error_class: str | None = None,
        error_message: str | None = None,
        owner: str | None = None,
    ) -> None:
        """Record how a running trial ended, with its metrics copied out of the result.

        Raises TrialAlreadyFinished if the trial is not running any more (finished by someone
        else, or marked lost): a trial is never recorded twice. With `owner`, only while that
        coordinator holds the study's lease (else LeaseLost): no result from a stale owner.
        """
        state = TrialState(state)
        if not state.finished:
            raise ValueError(f"finish needs a final state, not {state.value!r}")
        if isinstance(result, BaseModel):
            result = result.model_dump(mode="json")
        data = result or {}
        values: dict[str, Any] = {
            "state": state.value,
            "result": result,
            "objective_value": _finite(objective_value),
            "error_class": error_class or data.get("failure_class"),
            "error_message": error_message or data.get("error_message"),
            "fingerprint": _fingerprint_key(data.get("fingerprint")),
            "finished_at": utcnow(),
            **{name: _finite(data.get(name)) for name in _METRICS},
        }
        if trial.state != TrialState.RUNNING.value:
            raise _already_finished(trial, trial.state)
        if owner is not None:
            holder = self.session.scalar(
                select(Study.owner).where(Study.id == trial.study_id).with_for_update()
            )
            _check_owner(trial.study_id, holder, owner)
        updated = self.session.execute(
            update(Trial)
            .where(Trial.id == trial.id, Trial.state == TrialState.RUNNING.value)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if _rowcount(updated) != 1:
            current = self.session.scalar(select(Trial.state).where(Trial.id == trial.id))
            raise _already_finished(trial, current)
        _set(trial, **values)

    def heartbeat(self, trial_ids: Sequence[int]) -> None:
        """Mark these running trials alive now (finished ones are left alone)."""
        if not trial_ids:
            return
        self.session.execute(
            update(Trial)
            .where(Trial.id.in_(list(trial_ids)), Trial.state == TrialState.RUNNING.value)
            .values(heartbeat_at=db_now(self.session))
            .execution_options(synchronize_session=False)
        )

    def get(self, study_id: str, number: int) -> Trial | None:
        return self.session.scalars(
            select(Trial).where(Trial.study_id == study_id, Trial.number == number)
        ).first()

    def list(
        self, study_id: str, *, states: Sequence[TrialState] | None = None
    ) -> builtins.list[Trial]:
        """The study's trials by number, optionally only those in some states."""
        query = _in_states(select(Trial).where(Trial.study_id == study_id), states)
        return list(self.session.scalars(query.order_by(Trial.number)))

    def best(self, study_id: str) -> Trial | None:
        """The complete trial with the highest objective value (the earliest on a tie)."""
        return self.session.scalars(
            select(Trial)
            .where(
                Trial.study_id == study_id,
                Trial.state == TrialState.COMPLETE.value,
                Trial.objective_value.is_not(None),
            )
            .order_by(Trial.objective_value.desc(), Trial.number)
            .limit(1)
        ).first()

    def mark_lost(
        self, study_id: str, *, heartbeat_older_than: dt.datetime, reason: str = "lost"
    ) -> builtins.list[Trial]:
        """Running trials whose last heartbeat is older than the cutoff become lost (infra).

        `reason="cancelled"`: their study was cancelled while no coordinator ran it (they are
        failed, with that message; a cancelled study is never resumed, so never retried).

        The rows are locked first, so a result arriving at the same moment either lands before
        (the trial is not lost) or is refused after (TrialAlreadyFinished), never both.
        """
        last_seen = func.coalesce(Trial.heartbeat_at, Trial.started_at, Trial.created_at)
        stale = list(
            self.session.scalars(
                select(Trial)
                .where(
                    Trial.study_id == study_id,
                    Trial.state == TrialState.RUNNING.value,
                    last_seen < heartbeat_older_than,
                )
                .order_by(Trial.number)
                .with_for_update()
            )
        )
        now = db_now(self.session)
        for trial in stale:
            seen = trial.heartbeat_at or trial.started_at or trial.created_at
            trial.error_class = "infra"
            if reason == "cancelled":
                trial.state = TrialState.FAILED.value
                trial.error_message = "cancelled with the study (no coordinator was running it)"
            else:
                trial.state = TrialState.LOST.value
                trial.error_message = (
                    f"no heartbeat since {seen.isoformat(timespec='seconds')}: its worker or "
                    "coordinator stopped; the trial may be retried"
                )
            trial.finished_at = now
        self.session.flush()
        return stale

    def count(self, study_id: str, *, states: Sequence[TrialState] | None = None) -> int:
        query = _in_states(
            select(func.count()).select_from(Trial).where(Trial.study_id == study_id), states
        )
        return self.session.scalar(query) or 0


def _in_states(query: Select[Any], states: Sequence[TrialState] | None) -> Select[Any]:
    if states is None:
        return query
    return query.where(Trial.state.in_([TrialState(s).value for s in states]))


def _fingerprint_key(data: Any) -> str | None:
    if not data:
        return None
    try:
        return Fingerprint.model_validate(data).key
    except ValidationError as error:
        # The measurement is still worth keeping; only the comparability key is missing.
        log.warning("trial result has an unreadable fingerprint, stored without a key: %s", error)
        return None


def _already_finished(trial: Trial, state: str | None) -> TrialAlreadyFinished:
    return TrialAlreadyFinished(
        f"trial {trial.number} of study {trial.study_id} is already {state}; "
        "a trial is recorded once: start a new trial (retry_of=...) to measure it again"
    )


def _check_owner(study_id: str, holder: str | None, owner: str | None) -> None:
    if owner is not None and holder != owner:
        raise LeaseLost(
            f"study {study_id} is run by {holder or 'no coordinator'}, not {owner}; "
            "this coordinator lost its lease and must stop writing to it"
        )
