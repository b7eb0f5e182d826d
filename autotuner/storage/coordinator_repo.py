"""Coordinator claims: the `coordinators` rows that keep one live process per coordinator id.

What a claim means and when one may be taken over is study/coordinator_claim.py's to judge;
this module reads and writes the rows. Runs inside the caller's transaction and never commits
(see common.py).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, update
from sqlalchemy.orm import Session

from autotuner.storage.common import _rowcount
from autotuner.storage.models import Coordinator


class CoordinatorRepo:
    """The claim rows of coordinator ids: locked for a decision, inserted, renewed, deleted."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def lock(self, coordinator_id: str) -> Coordinator | None:
        """The claim of this id, its row locked until the transaction ends (so two processes
        starting at once judge it one after the other); None if nobody claimed it."""
        return self.session.get(Coordinator, coordinator_id, with_for_update=True)

    def insert(self, claim: Coordinator) -> None:
        """A first claim of its id. Two processes inserting one id at once: the second fails
        with IntegrityError at this flush and judges the winner's claim instead."""
        self.session.add(claim)
        self.session.flush()

    def renew(self, coordinator_id: str, instance: str, expires_at: dt.datetime) -> bool:
        """Move the expiry of `instance`'s claim; False if another instance holds the id now."""
        result = self.session.execute(
            update(Coordinator)
            .where(Coordinator.id == coordinator_id, Coordinator.instance == instance)
            .values(expires_at=expires_at)
            .execution_options(synchronize_session=False)
        )
        return _rowcount(result) == 1

    def release(self, coordinator_id: str, instance: str) -> None:
        """Delete `instance`'s claim (a no-op if another instance holds the id now)."""
        self.session.execute(
            delete(Coordinator).where(
                Coordinator.id == coordinator_id, Coordinator.instance == instance
            )
        )
