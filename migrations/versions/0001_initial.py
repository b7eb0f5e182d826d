"""Initial schema: studies and their trials.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Written out by hand (not imported from the models) so that it stays what it was when the models
change; tests/storage/test_migrations.py checks that models and migrations agree.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# JSONB on Postgres, JSON (text) on SQLite: the same variant type as the models use.
JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")
TIMESTAMPTZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "studies",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("model_spec", JSON, nullable=False),
        sa.Column("space", JSON, nullable=False),
        sa.Column("objective", sa.String(32), nullable=False),
        sa.Column("max_trials", sa.Integer(), nullable=True),
        sa.Column("max_minutes", sa.Float(), nullable=True),
        sa.Column("gpus_per_trial", sa.Integer(), nullable=False),
        sa.Column("sampler", sa.String(32), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("options", JSON, nullable=False),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", TIMESTAMPTZ, nullable=True),
        sa.Column("best_trial_number", sa.Integer(), nullable=True),
        sa.Column("recommendation", JSON, nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMPTZ, nullable=False),
        sa.Column("started_at", TIMESTAMPTZ, nullable=True),
        sa.Column("finished_at", TIMESTAMPTZ, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_studies"),
    )
    op.create_index("ix_studies_status", "studies", ["status"])
    op.create_index("ix_studies_name", "studies", ["name"])

    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("study_id", sa.String(32), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("purpose", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("retry_of", sa.Integer(), nullable=True),
        sa.Column("params", JSON, nullable=False),
        sa.Column("config", JSON, nullable=False),
        sa.Column("result", JSON, nullable=True),
        sa.Column("tokens_per_s", sa.Float(), nullable=True),
        sa.Column("tokens_per_s_per_gpu", sa.Float(), nullable=True),
        sa.Column("mfu", sa.Float(), nullable=True),
        sa.Column("peak_mem_gib", sa.Float(), nullable=True),
        sa.Column("compile_s", sa.Float(), nullable=True),
        sa.Column("objective_value", sa.Float(), nullable=True),
        sa.Column("error_class", sa.String(32), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("worker", sa.String(200), nullable=True),
        sa.Column("fingerprint", sa.String(32), nullable=True),
        sa.Column("created_at", TIMESTAMPTZ, nullable=False),
        sa.Column("started_at", TIMESTAMPTZ, nullable=True),
        sa.Column("finished_at", TIMESTAMPTZ, nullable=True),
        sa.Column("heartbeat_at", TIMESTAMPTZ, nullable=True),
        sa.Column("retried", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_trials"),
        sa.ForeignKeyConstraint(
            ["study_id"],
            ["studies.id"],
            name="fk_trials_study_id_studies",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("study_id", "number", name="uq_trials_study_number"),
    )
    op.create_index("ix_trials_study_state", "trials", ["study_id", "state"])
    op.create_index("ix_trials_fingerprint", "trials", ["fingerprint"])


def downgrade() -> None:
    op.drop_index("ix_trials_fingerprint", table_name="trials")
    op.drop_index("ix_trials_study_state", table_name="trials")
    op.drop_table("trials")
    op.drop_index("ix_studies_name", table_name="studies")
    op.drop_index("ix_studies_status", table_name="studies")
    op.drop_table("studies")
