"""Defaults of a study's options that are read without the options model (`StudyOptions`,
which imports pydantic): a trial list judges its rows by the study's stored headroom alone
(search/headroom.py's StoredHeadroom), and a headroom left at its default is not stored."""

from __future__ import annotations

# A real run also evaluates, checkpoints, fragments the allocator and sees other sequence
# lengths; the config that just fitted a 10-second trial runs out of memory hours later.
DEFAULT_HEADROOM = 0.10
