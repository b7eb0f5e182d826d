"""`autotuner resume`: an interrupted study made runnable again, where it stopped.

A study is `interrupted` when its user stopped `tune` (Ctrl-C, SIGTERM) or a service drained;
its trials then running were cancelled and stored as lost with error class `interrupted`
(`StudyRunner.interrupt`). Nothing runs it again until it is resumed: a service adopts queued
and running studies only. Resuming puts it back in the queue, and the coordinator that takes it
(`tune`'s process for a local resume, a service's for `--server`) rebuilds it from its rows as
after any restart (`StudyRunner.start`): the trials it had, the sampler told them, the stored
seed plan's seeds not run yet, the interrupted trials run again without spending their
config's retry or the trial budget. The time it spent interrupted is added to its waited
seconds (`paused_s`), so `--minutes` counts only the time it searched.
"""

from __future__ import annotations

from typing import Any

from autotuner.status import StudyStatus
from autotuner.storage.common import db_now
from autotuner.storage.models import Study
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.study.operations import Conflict, summaries
from autotuner.study.views import study_view


def resume_study(
    db: Database, ref: str, *, owner: str | None = None, ttl_s: float = 300.0
) -> dict[str, Any]:
    """Queue the interrupted study `ref` again and return its view. With `owner`, that
    coordinator also takes its lease in the same transaction, so no service sharing the
    database adopts it first. Conflict (one line, with what to do) for any other status."""
    with db.session() as s:
        found = StudyRepo(s).require(ref)
        # Locked: a second resume or a cancel at this moment waits, then sees the new status.
        study = s.get(Study, found.id, with_for_update=True, populate_existing=True)
        assert study is not None
        if study.status != StudyStatus.INTERRUPTED:
            raise Conflict(_not_interrupted(study))
        now = db_now(s)
        stopped = study.finished_at
        if stopped is not None:
            stopped = stopped if stopped.tzinfo else stopped.replace(tzinfo=now.tzinfo)
            # Interrupted is not searching: that time stays out of its --minutes.
            study.paused_s = (study.paused_s or 0.0) + max((now - stopped).total_seconds(), 0.0)
        study.error_message = None
        studies = StudyRepo(s)
        studies.set_status(study, StudyStatus.QUEUED)
        if owner is not None and not studies.try_acquire(study.id, owner, ttl_s):
            raise Conflict(
                f"study {study.id} is held by coordinator {study.owner}; wait for its lease to "
                "expire, or resume it on that service with --server"
            )
        return study_view(study, summaries(s, [study.id])[study.id], space_name=_space(study))


def _space(study: Study) -> str | None:
    name = study.space.get("name") if isinstance(study.space, dict) else None
    return str(name) if name is not None else None


def _not_interrupted(study: Study) -> str:
    if study.status in (StudyStatus.QUEUED, StudyStatus.RUNNING):
        return f"study {study.id} is {study.status}, not interrupted: nothing to resume"
    return (
        f"study {study.id} is {study.status}: only an interrupted study resumes; start a new "
        "one with `autotuner tune` (or `submit`)"
    )
