"""Every trial of a study read at once, as plain rows: what the recommendation and the end of a
study's evidence compute over.

A study of 50,000 trials read as ORM objects spent seconds building them (identity map,
instance state, one instrumented attribute read per column use: 1.3 million at the end of a
study) where the database took a fraction of that. So these reads select the columns and give
`TrialRow`s: plain objects with the Trial's attribute names, its `knobs`, and its `config` and
`result` JSON read only where asked for (`load_json`, one statement for many rows; a single
row's on first use, as the ORM's deferred columns are). They are read-only snapshots: nothing
written to them reaches the database.

Rows kept past their transaction (the re-judge keeps a study's rows per trials version:
study/recommend_cache.py) read what they lack through the session of the read using them
(`reading_in`), not the closed one they were read in.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Select, func, or_, select
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm.attributes import set_committed_value

from autotuner.purpose import END_CHECKS
from autotuner.spec import FailureClass, Knobs
from autotuner.storage.models import Study, Trial, TrialState

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

JSON_COLUMNS = ("config", "result")
# Not read of every trial: the JSON records, and the times and texts no computation over every
# trial uses (the timestamps' time zone conversion alone was a fifth of the read). A row reads
# any of them on first use.
NOT_READ = (*JSON_COLUMNS, "created_at", "started_at", "heartbeat_at", "worker", "error_message")
COLUMNS = tuple(c.key for c in Trial.__table__.columns if c.key not in NOT_READ)
_SELECTED = tuple(getattr(Trial, name) for name in COLUMNS)
# The session that rows kept past their own transaction read their JSON through (reading_in).
_READING: ContextVar[Session | None] = ContextVar("trial_rows_reading", default=None)


@contextmanager
def reading_in(session: Session) -> Iterator[None]:
    """Rows read in another (ended) transaction load what they lack through `session` here;
    per context, so two requests sharing kept rows each read through their own."""
    token = _READING.set(session)
    try:
        yield
    finally:
        _READING.reset(token)


class TrialRow:
    """A trial's columns as attributes (no __slots__: `name in row.__dict__` says what is in
    memory, as for an ORM row: study/columns.loaded)."""

    def __init__(self, session: Session, values: dict[str, Any]) -> None:
        self.__dict__.update(values)
        self.__dict__["_session"] = session

    def __getattr__(self, name: str) -> Any:
        # Only for what is not in memory: a column left out of the read, read on first use.
        if name in JSON_COLUMNS:
            load_json([self], JSON_COLUMNS)
        elif name in NOT_READ:
            load_json([self], (name,))
        else:
            raise AttributeError(f"a trial row has no {name!r}")
        return self.__dict__[name]

    @property
    def knobs(self) -> Knobs | None:
        """As Trial.knobs: the knobs this trial ran with, from its stored config."""
        stored = (self.config or {}).get("knobs")
        return Knobs.model_validate(stored) if stored else None

    def __repr__(self) -> str:
        return f"TrialRow(study_id={self.study_id!r}, number={self.number!r})"


def trials_version(session: Session, study_id: str) -> int | None:
    """The study's trials version as committed now (storage/trial_versions.py): read again
    after a study's rows, it says whether a trial was written between the two reads."""
    return session.scalar(select(Study.trials_version).where(Study.id == study_id))


def read(session: Session, query: Select[Any]) -> list[TrialRow]:
    # On the session's connection: plain Core rows, without the ORM's per-row loading.
    rows = session.connection().execute(query).all()
    return [TrialRow(session, dict(zip(COLUMNS, row, strict=True))) for row in rows]


def load_json(rows: Sequence[Any], names: Sequence[str] = JSON_COLUMNS) -> None:
    """The JSON `names` of these rows (TrialRows, or ORM trials with those columns deferred)
    that are not in memory, in one statement (not one per row, as reading each attribute
    would). ORM rows in no session (built in memory) are left as they are."""
    plain: dict[int, TrialRow] = {}
    mapped: dict[int, Trial] = {}
    session = None
    for t in rows:
        if isinstance(t, TrialRow):
            if any(name not in t.__dict__ for name in names):
                plain[t.id] = t
                session = _READING.get() or t.__dict__["_session"]
            continue
        state = sa_inspect(t)
        if state.session is not None and any(name in state.unloaded for name in names):
            mapped[t.id] = t
            session = state.session
    if session is None:
        return
    columns = [getattr(Trial, name) for name in names]
    found = session.execute(select(Trial.id, *columns).where(Trial.id.in_([*plain, *mapped])))
    for row in found:
        values = zip(names, row[1:], strict=True)
        if (target := plain.get(row[0])) is not None:
            for name, value in values:
                target.__dict__.setdefault(name, value)
        else:
            orm = mapped[row[0]]
            for name, value in values:
                if name in sa_inspect(orm).unloaded:
                    set_committed_value(orm, name, value)


def as_trials(rows: list[TrialRow]) -> list[Trial]:
    """The rows where a list of trials is read: they have every attribute a Trial has that the
    recommendation and the evidence read (tests compare both on the same study)."""
    return cast(list[Trial], rows)


def recommendation_rows(session: Session, study_id: str) -> list[Trial]:
    """The trials a recommendation reads: the measured ones (the candidates) and the end-of-study
    checks in any state (the numerics parity trials, the one-GPU reference), whose JSON the
    checks read. Failed, pruned and running search trials cannot change it: not read. Two
    statements however many trials."""
    rows = read(
        session,
        select(*_SELECTED)
        .where(
            Trial.study_id == study_id,
            or_(Trial.state == TrialState.COMPLETE.value, Trial.purpose.in_(END_CHECKS)),
        )
        .order_by(Trial.number),
    )
    load_json([t for t in rows if t.purpose in END_CHECKS])
    return as_trials(rows)


def end_of_study_rows(session: Session, study_id: str, *, low: int = 0) -> list[Trial]:
    """Every trial of the study (numbered `low` or above), for the final recommendation and
    its evidence: the JSON of the end checks (the checks read it) and of the out-of-memory
    trials (the cost model's lower bound is only there; search/evidence_replay.py) read with
    them, so the evidence is computed once the transaction is over. Two statements."""
    query = select(*_SELECTED).where(Trial.study_id == study_id)
    if low:
        query = query.where(Trial.number >= low)
    rows = read(session, query.order_by(Trial.number))
    _load_evidence_json(rows)
    return as_trials(rows)


def ended_rows(session: Session, study_id: str, low: int, high: int, limit: int) -> list[Trial]:
    """The trials numbered from `low` to below `high` (the first one still running: they have
    ended), at most `limit` of them, by number, with the JSON the evidence reads (as
    `end_of_study_rows`): what the evidence's replay is fed as a study goes on
    (study/end_kept.py, through storage/ended_feed.py). A range of the (study, number) index;
    two statements."""
    rows = read(
        session,
        select(*_SELECTED)
        .where(Trial.study_id == study_id, Trial.number >= low, Trial.number < high)
        .order_by(Trial.number)
        .limit(limit),
    )
    _load_evidence_json(rows)
    return as_trials(rows)


def _load_evidence_json(rows: list[TrialRow]) -> None:
    oom = FailureClass.OOM.value
    load_json(
        [
            t
            for t in rows
            if t.purpose in END_CHECKS or (t.error_class == oom and t.state != TrialState.PRUNED)
        ]
    )


def rows_from(session: Session, study_id: str, low: int) -> list[Trial]:
    """The trials a recommendation reads (as `recommendation_rows`), numbered `low` or above:
    a range of the (study, number) index, however long the study."""
    query = select(*_SELECTED).where(
        Trial.study_id == study_id,
        Trial.number >= low,
        or_(Trial.state == TrialState.COMPLETE.value, Trial.purpose.in_(END_CHECKS)),
    )
    return as_trials(read(session, query.order_by(Trial.number)))


def unfinished_from(session: Session, study_id: str) -> int:
    """The lowest number a trial of the study may still change at: the first one running (the
    partial index of running trials), else the next number to be given. Trials numbered below
    have ended, and an ended trial's measurement does not change."""
    running = session.scalar(
        select(func.min(Trial.number)).where(
            Trial.study_id == study_id, Trial.state == TrialState.RUNNING.value
        )
    )
    if running is not None:
        return int(running)
    last = session.scalar(select(func.max(Trial.number)).where(Trial.study_id == study_id))
    return 0 if last is None else int(last) + 1
