"""Trial columns for list views and charts: tokens_per_s_min, tokens_per_s_max, wall_s.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01

List views and charts read only columns (issue 16): the repeat spread and the wall time were
only in the `result` JSON, so a study's trial list decoded every result. Existing rows are
backfilled from their `result` JSON, in SQL (JSONB operators on Postgres, json_extract on
SQLite), so the upgrade of a big database is one statement, not a Python loop.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("tokens_per_s_min", "tokens_per_s_max", "wall_s")


def _from_result(dialect: str, name: str) -> str:
    """SQL for the number `name` of the row's result JSON (NULL when absent or not finite)."""
    if dialect == "postgresql":
        # jsonb_typeof guards the cast: only JSON numbers are copied.
        return (
            f"CASE WHEN jsonb_typeof(result->'{name}') = 'number' "
            f"THEN (result->>'{name}')::double precision END"
        )
    return (
        f"CASE WHEN json_type(result, '$.{name}') IN ('real', 'integer') "
        f"THEN json_extract(result, '$.{name}') END"
    )


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Float(), nullable=True))
    dialect = op.get_bind().dialect.name
    values = ", ".join(f"{name} = {_from_result(dialect, name)}" for name in COLUMNS)
    op.execute(f"UPDATE trials SET {values} WHERE result IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
