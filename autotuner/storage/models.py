"""SQLAlchemy 2 ORM classes: studies and their trials, mapped onto the Core tables of
storage/tables.py (their columns, types and indexes are there, with why each is kept).

The schema is created and changed only by Alembic (`migrations/`); a test checks that these
models and the migrations agree. The writes, and the reads that load whole studies and trials
(the coordinator, the recommendation), go through these classes; a read that only shows rows
can use the tables alone (storage/reads.py).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Index, text
from sqlalchemy.orm import DeclarativeBase, Mapped, relationship, validates

from autotuner.options import StudyOptions
from autotuner.spec import Knobs
from autotuner.status import StudyStatus as StudyStatus
from autotuner.status import TrialState as TrialState
from autotuner.storage import tables
from autotuner.storage.tables import MEASUREMENT_COLUMNS as MEASUREMENT_COLUMNS
from autotuner.storage.tables import NAMING_CONVENTION as NAMING_CONVENTION
from autotuner.storage.tables import JsonType as JsonType
from autotuner.storage.tables import OptionsJson as OptionsJson
from autotuner.storage.tables import UtcDateTime as UtcDateTime
from autotuner.storage.tables import global_batch_tokens


class Base(DeclarativeBase):
    metadata = tables.metadata


# The running trials alone (a handful, however long the history): the service's discovery
# finds the ended studies a dead coordinator left with one (migration 0006; by
# ix_trials_study_state it probed every study: 70 ms a round at 50,000 studies). Declared here,
# not with the table (tables.py): its options for each dialect load that dialect's module (SQLite's
# and Postgres's, 30 ms), which a process that only reads one database needs neither of.
Index(
    "ix_trials_running",
    tables.trials.c.study_id,
    postgresql_where=text("state = 'running'"),
    sqlite_where=text("state = 'running'"),
)


class Study(Base):
    __table__ = tables.studies

    id: Mapped[str]
    name: Mapped[str]
    status: Mapped[str]
    model_spec: Mapped[dict[str, Any]]
    space: Mapped[dict[str, Any]]
    objective: Mapped[str]
    max_trials: Mapped[int | None]
    max_minutes: Mapped[float | None]
    gpus_per_trial: Mapped[int]
    device_type: Mapped[str | None]
    sampler: Mapped[str]
    seed: Mapped[int]
    options: Mapped[StudyOptions]
    owner: Mapped[str | None]
    lease_expires_at: Mapped[dt.datetime | None]
    best_trial_number: Mapped[int | None]
    seeds: Mapped[dict[str, Any] | None]
    recommendation: Mapped[dict[str, Any] | None]
    error_message: Mapped[str | None]
    submit_key: Mapped[str | None]
    submit_digest: Mapped[str | None]
    waiting: Mapped[str | None]
    paused_s: Mapped[float]
    trials_version: Mapped[int]
    created_at: Mapped[dt.datetime]
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]

    trials: Mapped[list[Trial]] = relationship(
        back_populates="study", cascade="all, delete-orphan", order_by="Trial.number"
    )


class Trial(Base):
    __table__ = tables.trials

    id: Mapped[int]
    study_id: Mapped[str]
    number: Mapped[int]
    state: Mapped[str]
    purpose: Mapped[str]
    attempt: Mapped[int]
    retry_of: Mapped[int | None]
    params: Mapped[dict[str, Any]]
    config: Mapped[dict[str, Any]]
    result: Mapped[dict[str, Any] | None]
    tokens_per_s: Mapped[float | None]
    tokens_per_s_min: Mapped[float | None]
    tokens_per_s_max: Mapped[float | None]
    wall_s: Mapped[float | None]
    tokens_per_s_per_gpu: Mapped[float | None]
    mfu: Mapped[float | None]
    peak_mem_gib: Mapped[float | None]
    global_batch_tokens: Mapped[int | None]
    peak_reserved_gib: Mapped[float | None]
    peak_mem_with_eval_ckpt_gib: Mapped[float | None]
    peak_reserved_with_eval_ckpt_gib: Mapped[float | None]
    memory_kind: Mapped[str | None]
    memory_limit_gib: Mapped[float | None]
    input_wait_share: Mapped[float | None]
    stopped_early: Mapped[bool]
    compile_s: Mapped[float | None]
    objective_value: Mapped[float | None]
    error_class: Mapped[str | None]
    error_message: Mapped[str | None]
    worker: Mapped[str | None]
    fingerprint: Mapped[str | None]
    created_at: Mapped[dt.datetime]
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]
    heartbeat_at: Mapped[dt.datetime | None]
    retried: Mapped[bool]

    study: Mapped[Study] = relationship(back_populates="trials")

    @validates("config")
    def _config(self, key: str, config: dict[str, Any]) -> dict[str, Any]:
        # The global batch the config runs, kept beside it; the worker's own count replaces
        # it when the trial finishes (trial_repo.finished_columns).
        self.global_batch_tokens = global_batch_tokens(config)
        return config

    @property
    def knobs(self) -> Knobs | None:
        """The knobs this trial ran with, read back from its stored config (None: a config
        without knobs, e.g. a row whose dispatch never got that far)."""
        stored = (self.config or {}).get("knobs")
        return Knobs.model_validate(stored) if stored else None


class Coordinator(Base):
    """A running coordinator (`autotuner serve`) by its lease owner id (migration 0009).

    Studies' leases name their owner by this id alone, so two live services with one id would
    each take the other's studies for its own and mark their trials lost. Each service claims
    its id here at start with a random instance nonce and renews it while it runs; a second
    process with the same id finds a live claim that is not its own and refuses to start."""

    __table__ = tables.coordinators

    id: Mapped[str]
    instance: Mapped[str]
    host: Mapped[str]
    node: Mapped[str]
    pid: Mapped[int]
    started_at: Mapped[dt.datetime]
    expires_at: Mapped[dt.datetime]
