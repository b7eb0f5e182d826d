"""The study's device kind: `cuda` or `cpu`, what its trials run on.

Revision ID: 0004
Revises: 0003
Create Date: 2027-01-10

Issue 11: a CPU study's page said "1 GPU per trial" until its first result brought a
fingerprint. Where the trials run is known before any trial: the cluster's hardware when the
study is submitted (the service's and `tune`'s executor) and when a coordinator starts it; the
column records it, and the studies list filters on it. Existing studies are backfilled from
their newest trial's config, whose num_gpus is 0 exactly when it ran on a CPU-only cluster
(study/trials.py trial_config); a study without trials (or configs without num_gpus) stays
NULL, unknown, until a coordinator starts it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _num_gpus(dialect: str) -> str:
    """SQL for the trial config's num_gpus (alias t); NULL when absent or not a number."""
    if dialect == "postgresql":
        return (
            "CASE WHEN jsonb_typeof(t.config->'num_gpus') = 'number' "
            "THEN (t.config->>'num_gpus')::double precision END"
        )
    return (
        "CASE WHEN json_type(t.config, '$.num_gpus') IN ('real', 'integer') "
        "THEN json_extract(t.config, '$.num_gpus') END"
    )


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("device_type", sa.String(length=8), nullable=True))
    gpus = _num_gpus(op.get_bind().dialect.name)
    op.execute(
        "UPDATE studies SET device_type = ("
        f"SELECT CASE WHEN {gpus} = 0 THEN 'cpu' WHEN {gpus} > 0 THEN 'cuda' END "
        "FROM trials t WHERE t.study_id = studies.id ORDER BY t.number DESC LIMIT 1)"
    )


def downgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("device_type")
