"""The tables, in SQLAlchemy Core: studies, their trials, the coordinators.

The schema is created and changed only by Alembic (`migrations/`); a test checks that these
tables and the migrations agree. The ORM classes (storage/models.py) are mapped onto them; the
reads that a cold `autotuner status`/`best`/`trials` makes (storage/reads.py) use them alone,
so such a process never imports the ORM (a sixth of its time). JSON columns hold the verbatim
records (`TrialConfig`, `TrialResult`); the indexed columns beside them are what queries sort
and filter on. Times are timezone-aware UTC (`timestamptz` on Postgres; `UtcDateTime`
normalises SQLite's naive values on the way in and out).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
)

from autotuner.purpose import Purpose
from autotuner.status import StudyStatus, TrialState
from autotuner.types import utcnow

if TYPE_CHECKING:
    from autotuner.options import StudyOptions


class Jsonb(TypeDecorator[Any]):
    """Postgres's JSONB, its dialect imported when a Postgres engine first uses the type: a
    process on SQLite (the embedded default) never loads it (a twentieth of a cold read)."""

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        from sqlalchemy.dialects.postgresql import JSONB

        return dialect.type_descriptor(JSONB(none_as_null=True))


# JSONB on Postgres (indexable, compact), plain JSON on SQLite. none_as_null: a Python None is
# stored as SQL NULL (so `result IS NULL` means "no result"), not as the JSON literal `null`.
JsonType = JSON(none_as_null=True).with_variant(Jsonb(none_as_null=True), "postgresql")

# Named constraints, so later migrations can drop or alter them (SQLite batch mode needs names).
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


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


class OptionsJson(TypeDecorator["StudyOptions"]):
    """A study's options: `StudyOptions` in Python, its non-default fields as JSON in the row.

    The model is the only way options are written, so reading validates them again: a row that
    does not load is a bug, not user input. The model (and pydantic) is imported when options
    are first read or written, not by a read that selects none."""

    impl = JsonType
    cache_ok = True

    def process_bind_param(self, value: StudyOptions | None, dialect: Dialect) -> Any:
        from autotuner.options import StudyOptions

        return (value or StudyOptions()).stored()

    def process_result_value(self, value: Any, dialect: Dialect) -> StudyOptions:
        from autotuner.options import StudyOptions

        return StudyOptions.model_validate(value or {})


def default_options() -> StudyOptions:
    """A new study's options where none are given: every field its default."""
    from autotuner.options import StudyOptions

    return StudyOptions()


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


def _time(name: str, **kw: Any) -> Column[Any]:
    return Column(name, UtcDateTime(), **kw)


studies = Table(
    "studies",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(200), nullable=False, index=True),  # studies are looked up by name
    Column("status", String(16), nullable=False, default=StudyStatus.QUEUED, index=True),
    Column("model_spec", JsonType, nullable=False),
    Column("space", JsonType, nullable=False),  # the validated search space, verbatim
    Column("objective", String(32), nullable=False, default="tokens_per_s"),
    Column("max_trials", Integer),
    Column("max_minutes", Float),
    Column("gpus_per_trial", Integer, nullable=False, default=1),
    # What the trials run on, "cuda" or "cpu" (migration 0004): the cluster's hardware when the
    # study was submitted, then when a coordinator started it; None until one of them knew.
    Column("device_type", String(8)),
    Column("sampler", String(32), nullable=False, default="tpe"),
    Column("seed", Integer, nullable=False, default=0),
    Column("options", OptionsJson(), nullable=False, default=default_options),
    # Single writer: the coordinator that owns the study renews this lease while it runs it.
    Column("owner", String(64)),
    _time("lease_expires_at"),
    Column("best_trial_number", Integer),
    # The seeds as the coordinator planned them at the start (migration 0008): {"now": [params],
    # "later": [params], "expert": params | null}. A restarted coordinator queues again those
    # not run yet, and marks the expert default's trials as the plan says; a new plan would
    # differ by then (the cost model has learned from the trials since).
    Column("seeds", JsonType),
    Column("recommendation", JsonType),
    Column("error_message", Text),
    # The submit's Idempotency-Key (migration 0009): a retried submit with the same key finds
    # this study instead of creating another, even when the first one's COMMIT reply was lost.
    # Unique; null for studies submitted without one (`tune`, older studies).
    Column("submit_key", String(200), unique=True),
    # sha256 of the request the key came with: the same key with another request is refused.
    Column("submit_digest", String(64)),
    # Why the study launches nothing now (its cluster cannot run trials, its GPUs left), null
    # while it can; and the seconds it has waited so, left out of its time budget (migration
    # 0010, study/pause.py).
    Column("waiting", Text),
    Column("paused_s", Float, nullable=False, default=0.0, server_default=text("0")),
    # One more in every transaction that writes one of its trials (migration 0011,
    # storage/trial_versions.py): what readers derive from every trial is keyed on it.
    Column("trials_version", BigInteger, nullable=False, default=0, server_default=text("0")),
    _time("created_at", nullable=False, default=utcnow),
    _time("started_at"),
    _time("finished_at"),
)

trials = Table(
    "trials",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("study_id", String(32), ForeignKey("studies.id", ondelete="CASCADE"), nullable=False),
    Column("number", Integer, nullable=False),  # 0, 1, 2... unique within the study
    Column("state", String(16), nullable=False, default=TrialState.RUNNING),
    Column("purpose", String(16), nullable=False, default=Purpose.SEARCH),  # a Purpose value
    Column("attempt", Integer, nullable=False, default=1),
    Column("retry_of", Integer),  # the trial number this one retries
    Column("params", JsonType, nullable=False),  # the knob values Optuna proposed
    Column("config", JsonType, nullable=False),  # the TrialConfig sent to the worker, verbatim
    Column("result", JsonType),  # the TrialResult, verbatim
    Column("tokens_per_s", Float),
    # The min and max repeats and the wall time, copied out of `result` like the metrics above
    # (migration 0002): list views and charts read columns, never the result JSON.
    Column("tokens_per_s_min", Float),
    Column("tokens_per_s_max", Float),
    Column("wall_s", Float),
    Column("tokens_per_s_per_gpu", Float),
    Column("mfu", Float),
    Column("peak_mem_gib", Float),
    # What the recommendation and the lists read of every measured trial (migration 0003): its
    # global batch (tokens per optimizer step: the worker's count, else from the config, set
    # when the trial is created), its memory record (is it tight? search/headroom.py) and its
    # input-wait share (study/input_pipeline.py). Without them, one SELECT per row.
    Column("global_batch_tokens", BigInteger),
    Column("peak_reserved_gib", Float),
    Column("peak_mem_with_eval_ckpt_gib", Float),
    Column("peak_reserved_with_eval_ckpt_gib", Float),
    Column("memory_kind", String(16)),
    Column("memory_limit_gib", Float),
    Column("input_wait_share", Float),
    # Whether it stopped after its first repeat(s) (search/early_stop.py): never a candidate
    # of the recommendation, which finds such trials by this column (migration 0005).
    Column("stopped_early", Boolean, nullable=False, default=False, server_default=false()),
    Column("compile_s", Float),
    Column("objective_value", Float),
    Column("error_class", String(32)),
    Column("error_message", Text),
    Column("worker", String(200)),  # node / process that ran it
    Column("fingerprint", String(32), index=True),
    _time("created_at", nullable=False, default=utcnow),
    _time("started_at"),
    _time("finished_at"),
    _time("heartbeat_at"),
    Column("retried", Boolean, nullable=False, default=False),  # a retry has been scheduled
    UniqueConstraint("study_id", "number", name="uq_trials_study_number"),
    # A study's trials by state, with what its counts and best value read (migration 0011):
    # the summary (study/operations.summaries) reads this index, not the rows.
    Index("ix_trials_summary", "study_id", "state", "purpose", "retry_of", "objective_value"),
    # ix_trials_running, the partial index of the running trials, is declared in models.py:
    # its dialect options load both dialects, which a read (of one database) does without.
)

# A running coordinator (`autotuner serve`) by its lease owner id (migration 0009): see
# models.Coordinator.
coordinators = Table(
    "coordinators",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("instance", String(32), nullable=False),  # random per process
    Column("host", String(255), nullable=False),
    # Where `pid` names a process: the machine's boot id and the pid namespace. Host names
    # repeat (containers, one image on two machines); a pid can be judged only on its node.
    Column("node", String(64), nullable=False),
    Column("pid", Integer, nullable=False),
    _time("started_at", nullable=False),
    _time("expires_at", nullable=False),
)
