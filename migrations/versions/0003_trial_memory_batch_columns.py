"""Trial columns for the recommendation and lists: the global batch, the memory record, the
input-pipeline wait.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

Issue 16, again: the live recommendation, /best and the trial lists read each measured trial's
global batch (tokens per optimizer step), its memory record (reserved peaks, the peaks with an
evaluation pass and a checkpoint save, the memory kind and limit: whether it is `tight`) and
its input-wait share, which were only in the `config` and `result` JSON: one SELECT per row
(18,590 statements for one live recommendation at 10,000 trials). Existing rows are backfilled
in SQL, as in 0002: the numbers and the memory kind from `result`, the global batch from the
worker's `tokens_per_step`, else from the config (micro-batch x accumulation x ranks x seq_len,
as `trial_repo.global_batch_tokens` computes it).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NUMBERS = (
    "peak_reserved_gib",
    "peak_mem_with_eval_ckpt_gib",
    "peak_reserved_with_eval_ckpt_gib",
    "memory_limit_gib",
    "input_wait_share",
)


def _number(dialect: str, column: str, path: str) -> str:
    """SQL for the number at `path` (a.b) of a JSON column; NULL when absent or not a number."""
    keys = path.split(".")
    if dialect == "postgresql":
        where = "{" + ",".join(keys) + "}"
        return (
            f"CASE WHEN jsonb_typeof({column} #> '{where}') = 'number' "
            f"THEN ({column} #>> '{where}')::double precision END"
        )
    return (
        f"CASE WHEN json_type({column}, '$.{path}') IN ('real', 'integer') "
        f"THEN json_extract({column}, '$.{path}') END"
    )


def _text(dialect: str, column: str, name: str) -> str:
    if dialect == "postgresql":
        return f"CASE WHEN jsonb_typeof({column}->'{name}') = 'string' THEN {column}->>'{name}' END"
    return (
        f"CASE WHEN json_type({column}, '$.{name}') = 'text' "
        f"THEN json_extract({column}, '$.{name}') END"
    )


def _global_batch(dialect: str) -> str:
    """The worker's tokens_per_step, else micro-batch x accumulation x ranks x seq_len from the
    config (a knob the config leaves out counts 1, as Knobs' defaults; no seq_len: unknown)."""

    def n(column: str, path: str) -> str:
        return _number(dialect, column, path)

    from_config = (
        f"COALESCE({n('config', 'knobs.micro_batch_size')}, 1) "
        f"* COALESCE({n('config', 'knobs.grad_accum')}, 1) "
        f"* (CASE WHEN COALESCE({n('config', 'num_gpus')}, 0) > 1 "
        f"THEN {n('config', 'num_gpus')} ELSE 1 END) "
        f"* {n('config', 'model.seq_len')}"
    )
    reported = (
        f"CASE WHEN {n('result', 'tokens_per_step')} > 0 THEN {n('result', 'tokens_per_step')} END"
    )
    return f"CAST(COALESCE({reported}, {from_config}) AS BIGINT)"


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("global_batch_tokens", sa.BigInteger(), nullable=True))
        for name in NUMBERS:
            batch.add_column(sa.Column(name, sa.Float(), nullable=True))
        batch.add_column(sa.Column("memory_kind", sa.String(length=16), nullable=True))
    dialect = op.get_bind().dialect.name
    values = ", ".join(f"{name} = {_number(dialect, 'result', name)}" for name in NUMBERS)
    values += f", memory_kind = {_text(dialect, 'result', 'memory_kind')}"
    op.execute(f"UPDATE trials SET {values} WHERE result IS NOT NULL")
    op.execute(f"UPDATE trials SET global_batch_tokens = {_global_batch(dialect)}")


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("memory_kind")
        for name in reversed(NUMBERS):
            batch.drop_column(name)
        batch.drop_column("global_batch_tokens")
