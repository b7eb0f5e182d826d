"""Idempotent submits and coordinator identity: a study's submit key, a coordinators table.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06

- `studies.submit_key` (unique) and `submit_digest`: `POST /api/studies` with an
  Idempotency-Key stores it with the study in the same transaction, so a client that retries
  after losing the reply (a dropped COMMIT acknowledgement answered 503) gets the first study
  back rather than a second identical one running beside it.
- `coordinators`: each `autotuner serve` claims its coordinator id with an instance nonce and
  renews it; a second live process with the same id refuses to start instead of sharing every
  study's lease with the first (each marked the other's trials lost).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("submit_key", sa.String(200), nullable=True))
        batch.add_column(sa.Column("submit_digest", sa.String(64), nullable=True))
        batch.create_unique_constraint("uq_studies_submit_key", ["submit_key"])
    op.create_table(
        "coordinators",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("instance", sa.String(32), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("node", sa.String(64), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_coordinators"),
    )


def downgrade() -> None:
    op.drop_table("coordinators")
    with op.batch_alter_table("studies") as batch:
        batch.drop_constraint("uq_studies_submit_key", type_="unique")
        batch.drop_column("submit_digest")
        batch.drop_column("submit_key")
