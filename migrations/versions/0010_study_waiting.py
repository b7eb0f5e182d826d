"""Study columns for a study that waits for its cluster: why, and how long it has waited.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06

A study whose executor cannot run trials (the Ray head or its GCS down, a restarted cluster
being joined again) or whose GPUs left the cluster launches nothing until they are back
(study/pause.py). `waiting` says why while it lasts (`status`, the API, the dashboard), null
otherwise; `paused_s` adds up the seconds waited, which the time budget leaves out. Older
studies never waited: null and 0.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("waiting", sa.Text(), nullable=True))
        batch.add_column(
            sa.Column("paused_s", sa.Float(), nullable=False, server_default=sa.text("0"))
        )


def downgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("paused_s")
        batch.drop_column("waiting")
