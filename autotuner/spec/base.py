"""The base of every contract record, and the records' schema version."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION: Literal[1] = 1


class _Record(BaseModel):
    """Strict base: unknown keys are errors (a typo must not be silently ignored)."""

    # defer_build: a record's validator is built on its first use, not at import: a
    # process uses a few of the records, and a CLI read paid for building all of them.
    model_config = ConfigDict(
        extra="forbid", frozen=False, validate_assignment=True, defer_build=True
    )
