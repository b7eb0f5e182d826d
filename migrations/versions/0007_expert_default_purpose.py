"""The expert default's trials get their own purpose, `expert-default`, instead of being trial #0.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06

The recommendation compares its winner with the expert default (study/recommend.py
`vs_expert_default`, batch.py, input_pipeline.py). Until now they took it to be trial #0 when
that trial was a seed: the seeder always ran it first. That was wrong where #0 failed and its
retry measured it (the recommendation said "not measured" while the global-batch entry named
the retry), or where #0 was pruned for its default-allocator twin, and it kept any other seed
from running before it. Trials now store the role (search/progress.py EXPERT_DEFAULT).

Existing rows keep the meaning they were read with: trial #0 and its retries, where they are
seeds of a study that ran the expert seed (`options.expert_seed`, stored only when off).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _expert_seed_on(dialect: str) -> str:
    """SQL: the study's options do not turn the expert seed off (absent means on)."""
    if dialect == "postgresql":
        return "COALESCE((options ->> 'expert_seed')::boolean, true)"
    return "COALESCE(json_extract(options, '$.expert_seed'), 1) = 1"


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute(
        "UPDATE trials SET purpose = 'expert-default' "
        "WHERE purpose = 'seed' AND (number = 0 OR retry_of = 0) "
        f"AND study_id IN (SELECT id FROM studies WHERE {_expert_seed_on(dialect)})"
    )


def downgrade() -> None:
    op.execute("UPDATE trials SET purpose = 'seed' WHERE purpose = 'expert-default'")
