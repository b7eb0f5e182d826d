"""Trials of a study: numbered, started, finished once, heartbeated, marked lost.

Runs inside the caller's transaction and never commits (see common.py)."""

from __future__ import annotations

import builtins
import datetime as dt
import logging
import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlalchemy import Select, func, select, true, update
from sqlalchemy.orm import Session

from autotuner.purpose import Purpose
from autotuner.spec import Fingerprint
from autotuner.status import ENDED_STATUSES
from autotuner.storage import reads
from autotuner.storage.common import (
    _LIST_HINT,
    LeaseLost,
    StudyNotFound,
    TrialAlreadyFinished,
    _fits,
    _rowcount,
    _set,
    db_now,
)
from autotuner.storage.models import (
    MEASUREMENT_COLUMNS,
    Study,
    StudyStatus,
    Trial,
    TrialState,
)
from autotuner.storage.trial_versions import bump
from autotuner.types import utcnow

# The error class of a trial cancelled with its interrupted study (state lost): not a
# FailureClass, since no process of the config failed, and not counted as a loss in a row.
INTERRUPTED = StudyStatus.INTERRUPTED.value

log = logging.getLogger(__name__)

# Copied out of the result into columns of their own: what lists, charts and sorts read.
_METRICS = (
    *MEASUREMENT_COLUMNS,
    # The memory record (whether a trial is tight) and the input wait (migration 0003).
    "peak_reserved_gib",
    "peak_mem_with_eval_ckpt_gib",
    "peak_reserved_with_eval_ckpt_gib",
    "memory_limit_gib",
    "input_wait_share",
)
_MEMORY_KINDS = ("cuda", "cpu_rss")  # TrialResult.memory_kind


def _finite(value: Any) -> float | None:
    """A metric as stored: NaN or infinite is no measurement (and would sort above every number)."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


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
        purpose: str = Purpose.SEARCH,
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
        purpose: str = Purpose.SEARCH,
    ) -> Trial:
        """A trial ruled out before launch: recorded as pruned, finished at once."""
        return self._create(
            study_id,
            owner=owner,
            purpose=purpose,
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
        _fits("purpose", fields.get("purpose"), 16, "use search, seed, expert-default or remeasure")
        fields.setdefault("purpose", Purpose.SEARCH)
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
        values = finished_columns(
            state,
            result=result,
            objective_value=objective_value,
            error_class=error_class,
            error_message=error_message,
        )
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
        bump(self.session, [trial.study_id])  # an UPDATE statement: no flush sees it
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
        self,
        study_id: str,
        *,
        states: Sequence[TrialState] | None = None,
        purposes: Sequence[str] | None = None,
    ) -> builtins.list[Trial]:
        """The study's trials by number, optionally only those in some states, or run for
        some purposes."""
        query = _in_states(select(Trial).where(Trial.study_id == study_id), states)
        if purposes is not None:
            query = query.where(Trial.purpose.in_(list(purposes)))
        return list(self.session.scalars(query.order_by(Trial.number)))

    def best(self, study_id: str) -> Trial | None:
        """The complete trial with the highest objective value (the earliest on a tie)."""
        return self.session.scalars(reads.best_trial_query(study_id, Trial)).first()

    def mark_lost(
        self, study_id: str, *, heartbeat_older_than: dt.datetime, reason: str = "lost"
    ) -> builtins.list[Trial]:
        """Running trials whose last heartbeat is older than the cutoff become lost (infra).

        `reason="cancelled"`: their study was cancelled while no coordinator ran it (they are
        failed, with that message; a cancelled study is never resumed, so never retried).
        A reason starting "interrupted" (`interrupted by SIGINT`): their study was interrupted;
        they are lost with error class `interrupted`, and its resume runs each again.

        The rows are locked first, so a result arriving at the same moment either lands before
        (the trial is not lost) or is refused after (TrialAlreadyFinished), never both.
        """
        # The study row first, as every writer of its trials takes it (numbering, finishing,
        # the trials version this write moves): rows locked in one order never deadlock.
        self.session.execute(select(Study.id).where(Study.id == study_id).with_for_update())
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
                trial.error_message = (
                    "cancelled with the study (no live coordinator was left to stop it)"
                )
            elif reason.startswith(INTERRUPTED):
                # Stopped with its study: nothing about its config, run again at resume.
                trial.state = TrialState.LOST.value
                trial.error_class = INTERRUPTED
                trial.error_message = (
                    f"{reason}: cancelled with its study, it runs again when the study resumes"
                )[:2000]
            else:
                trial.state = TrialState.LOST.value
                trial.error_message = (
                    f"no heartbeat since {seen.isoformat(timespec='seconds')}: its worker or "
                    "coordinator stopped; the trial may be retried"
                )
            trial.finished_at = now
        self.session.flush()
        return stale

    def end_abandoned(self, study_id: str | None = None) -> builtins.list[Trial]:
        """Running trials of ended studies that nobody will end: their study was cancelled
        (or finished) while a coordinator held it, and that coordinator died before it stopped
        them. Its lease has expired, so no live coordinator can report them; without this they
        would stay `running` in a finished study forever. A cancelled study's
        are failed as cancelled, any other's lost (mark_lost). `study_id`: that study's only."""
        now = db_now(self.session)
        studies = self.session.execute(abandoned_studies(now, study_id)).all()
        far = now + dt.timedelta(days=1)
        out: builtins.list[Trial] = []
        for ended_id, status in studies:
            reason = "cancelled" if status == StudyStatus.CANCELLED.value else "lost"
            out += self.mark_lost(ended_id, heartbeat_older_than=far, reason=reason)
        return out

    def count(self, study_id: str, *, states: Sequence[TrialState] | None = None) -> int:
        query = _in_states(
            select(func.count()).select_from(Trial).where(Trial.study_id == study_id), states
        )
        return self.session.scalar(query) or 0

    def unretried_failures(self, study_id: str) -> builtins.list[tuple[str, str, int]]:
        """(state, purpose, attempt) of the study's failed and lost trials that no re-run was
        dispatched for yet: what a restarted coordinator may run again."""
        rows = self.session.execute(
            select(Trial.state, Trial.purpose, Trial.attempt).where(
                Trial.study_id == study_id,
                Trial.state.in_((TrialState.FAILED.value, TrialState.LOST.value)),
                Trial.retried.is_(False),
            )
        )
        return [(state, purpose, attempt) for state, purpose, attempt in rows]


def abandoned_studies(now: dt.datetime, study_id: str | None = None) -> Select[str, str]:
    """(id, status) of the ended studies whose lease is over (at `now`, the database's clock)
    and that still have a running trial (TrialRepo.end_abandoned; bench/discovery_10k.py
    shows its plan). The partial index ix_trials_running keeps it to the running trials."""
    return (
        select(Study.id, Study.status)
        .where(
            Study.status.in_(sorted(ENDED_STATUSES)),
            Study.owner.is_(None)
            | Study.lease_expires_at.is_(None)
            | (Study.lease_expires_at < now),
            select(Trial.id)
            .where(Trial.study_id == Study.id, Trial.state == TrialState.RUNNING.value)
            .exists(),
        )
        .where(Study.id == study_id if study_id is not None else true())
        .order_by(Study.id)
    )


def finished_columns(
    state: TrialState,
    *,
    result: dict[str, Any] | BaseModel | None,
    objective_value: float | None = None,
    error_class: str | None = None,
    error_message: str | None = None,
) -> dict[str, Any]:
    """The columns of a trial that ended in `state` with `result`: the result verbatim and its
    metrics copied out (what `finish` writes; bench/reads_lib/seed.py bulk-inserts the same
    rows)."""
    if isinstance(result, BaseModel):
        result = result.model_dump(mode="json")
    data = result or {}
    kind = data.get("memory_kind")
    reported = {"global_batch_tokens": int(n)} if (n := data.get("tokens_per_step")) else {}
    return {
        **reported,  # else the config's, stored when the trial was created
        "memory_kind": kind if kind in _MEMORY_KINDS else None,
        "state": TrialState(state).value,
        "result": result,
        "objective_value": _finite(objective_value),
        "error_class": error_class or data.get("failure_class"),
        "error_message": error_message or data.get("error_message"),
        "fingerprint": _fingerprint_key(data.get("fingerprint")),
        "stopped_early": data.get("stopped_early") is True,
        "finished_at": utcnow(),
        **{name: _finite(data.get(name)) for name in _METRICS},
    }


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
