"""A study column for its seed plan, so a restarted coordinator runs the seeds not run yet.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06

The coordinator queues a new study's seeds (the expert default, earlier winners, the expert's
closest alternatives, search/seeding.py) in memory. A coordinator that died before they ran
(kill -9 of the service) left a study whose restart planned no seeds: it went on with the
sampler alone, and the fp8 seed that the Llama studies' best depends on could be skipped. The
plan is stored at the start instead; a restart queues what has not run. Older studies have none
(null): they resume as before.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # JSONB on Postgres, JSON (text) on SQLite: the models' variant type (0001).
    json_type = sa.JSON(none_as_null=True).with_variant(
        postgresql.JSONB(none_as_null=True), "postgresql"
    )
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("seeds", json_type, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("seeds")
