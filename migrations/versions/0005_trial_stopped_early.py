"""A trial column for `stopped_early`: the recommendation finds early-stopped trials by it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

A trial that stopped after its first repeat(s) (search/early_stop.py) is never a candidate, so
every recommendation (after each finished trial, and at the end of the study) must find those
trials; the flag was only in the `result` JSON, found with a JSON-path query and then each such
result loaded. As a column it is read with the rest of the row. Existing rows are backfilled
from the result (true only where the JSON says true), as 0002-0004 backfill theirs.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _stopped_early(dialect: str) -> str:
    """SQL: the result JSON's `stopped_early` is the boolean true (absent, null, false or any
    other type: not stopped early)."""
    if dialect == "postgresql":
        return "result -> 'stopped_early' = 'true'::jsonb"
    return "json_type(result, '$.stopped_early') = 'true'"


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(
            sa.Column("stopped_early", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    dialect = op.get_bind().dialect.name
    op.execute(
        "UPDATE trials SET stopped_early = true "
        f"WHERE result IS NOT NULL AND {_stopped_early(dialect)}"
    )


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("stopped_early")
