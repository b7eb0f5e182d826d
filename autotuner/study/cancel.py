"""Cancel a study, from the API or the CLI: what the operation writes and the view it returns."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from autotuner.status import ENDED_STATUSES
from autotuner.study.operations import Conflict, summaries

if TYPE_CHECKING:
    from autotuner.storage.session import Database


def cancel_study(db: Database, ref: str) -> dict[str, Any]:
    """Cancel a queued or running study. Its coordinator stops its trials within a step; when
    no coordinator holds it, its running trials are ended here."""
    from autotuner.storage.common import db_now
    from autotuner.storage.models import Study, StudyStatus
    from autotuner.storage.study_repo import StudyRepo
    from autotuner.storage.trial_repo import TrialRepo
    from autotuner.study.views import study_view

    with db.session() as s:
        studies = StudyRepo(s)
        found = studies.require(ref)
        # Lock the row: a coordinator taking the study at this moment waits, then sees it.
        study = s.get(Study, found.id, with_for_update=True, populate_existing=True)
        assert study is not None
        if study.status in ENDED_STATUSES:
            # Cancelled once while its coordinator lived, which died before it stopped the
            # trials: cancelling again ends them, once that coordinator's lease has expired.
            if not TrialRepo(s).end_abandoned(study.id):
                raise Conflict(f"study {study.id} is already {study.status}; nothing to cancel")
            return study_view(
                study, summaries(s, [study.id])[study.id], space_name=study.space.get("name")
            )
        studies.set_status(study, StudyStatus.CANCELLED)
        now = db_now(s)
        expires = study.lease_expires_at
        if study.owner is None or expires is None or _aware(expires) < now:
            # No live coordinator will see the cancel: its running trials end here, or they
            # would stay `running` in a finished study forever.
            TrialRepo(s).mark_lost(
                study.id, heartbeat_older_than=now + dt.timedelta(days=1), reason="cancelled"
            )
            studies.release(study.id, study.owner or "")
        return study_view(
            study, summaries(s, [study.id])[study.id], space_name=study.space.get("name")
        )


def _aware(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
