"""SQLAlchemy 2 models: studies and their trials.

The schema is created and changed only by Alembic (`migrations/`); a test checks that these
models and the migrations agree. JSON columns hold the verbatim records (`TrialConfig`,
`TrialResult`); the indexed columns beside them are what queries sort and filter on.
Times are timezone-aware UTC (`timestamptz` on Postgres; `UtcDateTime` normalises SQLite's
naive values on the way in and out).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, validates

from autotuner.options import StudyOptions
from autotuner.purpose import Purpose
from autotuner.spec import Knobs
from autotuner.status import StudyStatus
from autotuner.types import utcnow

# JSONB on Postgres (indexable, compact), plain JSON on SQLite. none_as_null: a Python None is
# stored as SQL NULL (so `result IS NULL` means "no result"), not as the JSON literal `null`.
JsonType = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")

# Named constraints, so later migrations can drop or alter them (SQLite batch mode needs names).
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def global_batch_tokens(
    config: Mapping[str, Any] | None, result: Mapping[str, Any] | None = None
) -> int | None:
    """Tokens per optimizer step: the worker's own count when it reported one, else from the
    config (micro-batch x accumulation x ranks x seq_len); None without a config. Stored as
    the trial's `global_batch_tokens` column: from the config when it is set (Trial._config),
    from the result when the trial finishes (trial_repo.finished_columns)."""
    if result and result.get("tokens_per_step"):
        return int(result["tokens_per_step"])
    if not config:
        return None
    knobs, model = config.get("knobs") or {}, config.get("model") or {}
    if not model.get("seq_len"):
        return None
    ranks = max(int(config.get("num_gpus") or 0), 1)
    micro, accum = int(knobs.get("micro_batch_size", 1)), int(knobs.get("grad_accum", 1))
    return micro * accum * ranks * int(model["seq_len"])


class OptionsJson(TypeDecorator[StudyOptions]):
    """A study's options: `StudyOptions` in Python, its non-default fields as JSON in the row.

    The model is the only way options are written, so reading validates them again: a row that
    does not load is a bug, not user input."""

    impl = JsonType
    cache_ok = True

    def process_bind_param(self, value: StudyOptions | None, dialect: Dialect) -> Any:
        return (value or StudyOptions()).stored()

    def process_result_value(self, value: Any, dialect: Dialect) -> StudyOptions:
        return StudyOptions.model_validate(value or {})


class UtcDateTime(TypeDecorator[dt.datetime]):
    """`timestamptz` that always hands back aware UTC datetimes, on Postgres and on SQLite.

    SQLite has no time zone type: SQLAlchemy stores the wall-clock fields and reads them back
    naive. Converting to UTC before storing makes the stored text sort and compare correctly.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(
                f"naive datetime {value.isoformat()} has no time zone; "
                "pass an aware UTC one, e.g. datetime.now(datetime.UTC)"
            )
        return value.astimezone(dt.UTC)

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:  # SQLite: stored as UTC, read back naive
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dt.datetime: UtcDateTime(), dict[str, Any]: JsonType}


# A trial's measurement as columns of its own, copied out of its result when it finishes
# (storage/trial_repo.py) and read by every list (storage/trial_list.py): what lists, charts and
# sorts show without decoding the result JSON. In this order: list_view unpacks a row by position
# (tests/dashboard/test_reads.py checks each column against the result).
MEASUREMENT_COLUMNS = (
    "tokens_per_s",
    "tokens_per_s_min",
    "tokens_per_s_max",
    "tokens_per_s_per_gpu",
    "mfu",
    "peak_mem_gib",
    "compile_s",
    "wall_s",
)


class TrialState(StrEnum):
    RUNNING = "running"  # dispatched; heartbeat_at moves while it runs
    COMPLETE = "complete"  # measured
    INFEASIBLE = "infeasible"  # a config failure (oom, unsupported, compile_error, numerics)
    FAILED = "failed"  # an infra failure (timeout, crash, infra); may be retried once
    LOST = "lost"  # its coordinator died or its heartbeat stopped; retried once
    PRUNED = "pruned"  # never launched: rules or the cost model ruled it out

    @property
    def finished(self) -> bool:
        return self != TrialState.RUNNING


class Study(Base):
    __tablename__ = "studies"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), index=True)  # studies are looked up by name
    status: Mapped[str] = mapped_column(String(16), default=StudyStatus.QUEUED, index=True)
    model_spec: Mapped[dict[str, Any]]
    space: Mapped[dict[str, Any]]  # the validated search space, verbatim
    objective: Mapped[str] = mapped_column(String(32), default="tokens_per_s")
    max_trials: Mapped[int | None] = mapped_column(Integer)
    max_minutes: Mapped[float | None] = mapped_column(Float)
    gpus_per_trial: Mapped[int] = mapped_column(Integer, default=1)
    # What the trials run on, "cuda" or "cpu" (migration 0004): the cluster's hardware when the
    # study was submitted, then when a coordinator started it; None until one of them knew.
    device_type: Mapped[str | None] = mapped_column(String(8))
    sampler: Mapped[str] = mapped_column(String(32), default="tpe")
    seed: Mapped[int] = mapped_column(Integer, default=0)
    options: Mapped[StudyOptions] = mapped_column(OptionsJson, default=StudyOptions)
    # Single writer: the coordinator that owns the study renews this lease while it runs it.
    owner: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[dt.datetime | None]
    best_trial_number: Mapped[int | None] = mapped_column(Integer)
    # The seeds as the coordinator planned them at the start (migration 0008): {"now": [params],
    # "later": [params], "expert": params | null}. A restarted coordinator queues again those
    # not run yet, and marks the expert default's trials as the plan says; a new plan would
    # differ by then (the cost model has learned from the trials since).
    seeds: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    recommendation: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    error_message: Mapped[str | None] = mapped_column(Text)
    # The submit's Idempotency-Key (migration 0009): a retried submit with the same key finds
    # this study instead of creating another, even when the first one's COMMIT reply was lost.
    # Unique; null for studies submitted without one (`tune`, older studies).
    submit_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    # sha256 of the request the key came with: the same key with another request is refused.
    submit_digest: Mapped[str | None] = mapped_column(String(64))
    # Why the study launches nothing now (its cluster cannot run trials, its GPUs left), null
    # while it can; and the seconds it has waited so, left out of its time budget (migration
    # 0010, study/pause.py).
    waiting: Mapped[str | None] = mapped_column(Text)
    paused_s: Mapped[float] = mapped_column(Float, default=0.0, server_default=text("0"))
    # One more in every transaction that writes one of its trials (migration 0011,
    # storage/trial_versions.py): what readers derive from every trial is keyed on it.
    trials_version: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]

    trials: Mapped[list[Trial]] = relationship(
        back_populates="study", cascade="all, delete-orphan", order_by="Trial.number"
    )


class Trial(Base):
    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("study_id", "number", name="uq_trials_study_number"),
        # A study's trials by state, with what its counts and best value read (migration
        # 0011): the summary (study/operations.summaries) reads this index, not the rows.
        Index("ix_trials_summary", "study_id", "state", "purpose", "retry_of", "objective_value"),
        # The running trials alone (a handful, however long the history): the service's
        # discovery finds the ended studies a dead coordinator left with one (migration 0006;
        # by ix_trials_study_state it probed every study: 70 ms a round at 50,000 studies).
        Index(
            "ix_trials_running",
            "study_id",
            postgresql_where=text("state = 'running'"),
            sqlite_where=text("state = 'running'"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)  # 0, 1, 2... unique within the study
    state: Mapped[str] = mapped_column(String(16), default=TrialState.RUNNING)
    purpose: Mapped[str] = mapped_column(String(16), default=Purpose.SEARCH)  # a Purpose value
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    retry_of: Mapped[int | None] = mapped_column(Integer)  # the trial number this one retries
    params: Mapped[dict[str, Any]]  # the knob values Optuna proposed
    config: Mapped[dict[str, Any]]  # the TrialConfig sent to the worker, verbatim
    result: Mapped[dict[str, Any] | None] = mapped_column(JsonType)  # the TrialResult, verbatim
    tokens_per_s: Mapped[float | None] = mapped_column(Float)
    # The min and max repeats and the wall time, copied out of `result` like the metrics above
    # (migration 0002): list views and charts read columns, never the result JSON.
    tokens_per_s_min: Mapped[float | None] = mapped_column(Float)
    tokens_per_s_max: Mapped[float | None] = mapped_column(Float)
    wall_s: Mapped[float | None] = mapped_column(Float)
    tokens_per_s_per_gpu: Mapped[float | None] = mapped_column(Float)
    mfu: Mapped[float | None] = mapped_column(Float)
    peak_mem_gib: Mapped[float | None] = mapped_column(Float)
    # What the recommendation and the lists read of every measured trial (migration 0003): its
    # global batch (tokens per optimizer step: the worker's count, else from the config, set
    # when the trial is created), its memory record (is it tight? search/headroom.py) and its
    # input-wait share (study/input_pipeline.py). Without them, one SELECT per row.
    global_batch_tokens: Mapped[int | None] = mapped_column(BigInteger)
    peak_reserved_gib: Mapped[float | None] = mapped_column(Float)
    peak_mem_with_eval_ckpt_gib: Mapped[float | None] = mapped_column(Float)
    peak_reserved_with_eval_ckpt_gib: Mapped[float | None] = mapped_column(Float)
    memory_kind: Mapped[str | None] = mapped_column(String(16))
    memory_limit_gib: Mapped[float | None] = mapped_column(Float)
    input_wait_share: Mapped[float | None] = mapped_column(Float)
    # Whether it stopped after its first repeat(s) (search/early_stop.py): never a candidate
    # of the recommendation, which finds such trials by this column (migration 0005).
    stopped_early: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    compile_s: Mapped[float | None] = mapped_column(Float)
    objective_value: Mapped[float | None] = mapped_column(Float)
    error_class: Mapped[str | None] = mapped_column(String(32))
    error_message: Mapped[str | None] = mapped_column(Text)
    worker: Mapped[str | None] = mapped_column(String(200))  # node / process that ran it
    fingerprint: Mapped[str | None] = mapped_column(String(32), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]
    heartbeat_at: Mapped[dt.datetime | None]
    retried: Mapped[bool] = mapped_column(Boolean, default=False)  # a retry has been scheduled

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

    __tablename__ = "coordinators"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    instance: Mapped[str] = mapped_column(String(32))  # random per process
    host: Mapped[str] = mapped_column(String(255))
    # Where `pid` names a process: the machine's boot id and the pid namespace. Host names
    # repeat (containers, one image on two machines); a pid can be judged only on its node.
    node: Mapped[str] = mapped_column(String(64))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[dt.datetime]
    expires_at: Mapped[dt.datetime]
