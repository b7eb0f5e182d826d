"""Idempotent submits: a study request with an Idempotency-Key is recorded once.

A client that does not hear back from `POST /api/studies` (the reply lost, the study's COMMIT
acknowledgement lost and answered 503 "retry") cannot tell whether its study exists. With a
key it retries safely: the key is stored with the study (`studies.submit_key`, unique) in the
transaction that creates it, so the retry finds that study and gets it back, and two racing
requests with one key make one study (the loser's insert breaks the unique constraint and
reads the winner's). The same key with a different request is refused: it is a client bug,
and answering with the other study would hide it.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING

from autotuner.inputs import UserError
from autotuner.storage.study_repo import StudyRepo

if TYPE_CHECKING:
    from autotuner.storage.session import Database
    from autotuner.study.request import StudyRequest

HEADER = "Idempotency-Key"
# Visible ASCII, as an HTTP header value carries it; long enough for a UUID or a ULID with a
# client prefix, short enough for an index.
_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")


class KeyReused(UserError):
    """The key was sent before with another request (HTTP 422; the message says what to do)."""


def check_key(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise UserError(
            f"{HEADER}: give 1 to 200 visible ASCII characters (a fresh UUID per study, "
            "reused only for retries of the same request)"
        )
    return key


def digest(req: StudyRequest) -> str:
    """The request's fingerprint: its validated fields, canonical JSON."""
    text = json.dumps(req.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def find(db: Database, key: str, req_digest: str) -> str | None:
    """The id of the study this key created, or None; KeyReused if it came with another
    request."""
    with db.read() as s:
        row = StudyRepo(s).by_submit_key(key)
    if row is None:
        return None
    study_id, stored = row
    if stored != req_digest:
        raise KeyReused(
            f"{HEADER} {key!r} was used for a different request (study {study_id}); send a new "
            "key for a new study, or the same request to get that study back"
        )
    return study_id
