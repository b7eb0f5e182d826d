"""A study's trials version, and an index that answers its trial counts without the rows.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06

`studies.trials_version` goes up by one in every transaction that writes one of the study's
trials (storage/trial_versions.py), under the study row's lock: readers key what they derive
from every trial (the counts per state, the best value) on (study, version) and compute it
once per change, not once per read (a study view at 50,000 trials read every trial: 92 ms).
Existing studies start at 0.

`ix_trials_summary` replaces `ix_trials_study_state` (its first two columns): with purpose,
retry_of and the objective in the index, the counts of a study read the index alone
(PostgreSQL's index-only scan), not every trial row.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SUMMARY = ["study_id", "state", "purpose", "retry_of", "objective_value"]


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(
            sa.Column("trials_version", sa.BigInteger(), nullable=False, server_default="0")
        )
    op.create_index("ix_trials_summary", "trials", SUMMARY)
    op.drop_index("ix_trials_study_state", table_name="trials")


def downgrade() -> None:
    op.create_index("ix_trials_study_state", "trials", ["study_id", "state"])
    op.drop_index("ix_trials_summary", table_name="trials")
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("trials_version")
