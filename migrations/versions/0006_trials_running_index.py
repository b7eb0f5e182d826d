"""A partial index of the running trials: the service's discovery reads them every few seconds.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03

Discovery (study/scheduler.py) ends the trials a dead coordinator left running in a study that
ended under it (`TrialRepo.end_abandoned`): ended studies with a running trial. Through
`ix_trials_study_state` PostgreSQL either scanned that whole index for state 'running' or
probed it once per ended study: a round took 2 ms at 10,000 studies and 70 ms at 50,000
(`bench/discovery_10k.py`), growing with the history. The running trials are a handful at any
time; an index of them alone keeps the round's cost there.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RUNNING = sa.text("state = 'running'")


def upgrade() -> None:
    op.create_index(
        "ix_trials_running",
        "trials",
        ["study_id"],
        postgresql_where=RUNNING,
        sqlite_where=RUNNING,
    )


def downgrade() -> None:
    op.drop_index("ix_trials_running", table_name="trials")
