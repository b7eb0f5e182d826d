"""The service's coordinator: one background thread running every study over one executor.

Each study keeps its own `StudyRunner` (its state machine, its Optuna study, its lease: still one
writer per study). The scheduler owns what they share:

- the executor: it calls `collect()` once per round and routes each finished trial to the runner
  that launched it (by handle), then lets each runner record, honour a cancel and keep its lease;
- the free slots: it hands them out one at a time, round-robin over the running studies, starting
  from a different study each round, so one large study cannot starve the others. How many
  slots there are is the executor's answer (Ray's free GPUs), never a guess;
- discovery: on start, and then every few seconds or when the API wakes it, it picks up queued
  studies and unfinished ones left by a dead coordinator. `StudyRunner.start()` then marks that
  coordinator's running trials lost and queues each for one retry.

The database may go away (a Postgres restart): a round that fails on it is retried, and a
finished trial whose result could not be stored stays in its runner's `in_flight` and is stored
on a later round. Nothing is dropped and nothing is dispatched twice. The cluster may go away
too (`ExecutorUnavailable`): the same, a wait and a retry, never a failed study.

The thread never dies of a round that raised: the round is logged, the state says `error` with
the reason until a round succeeds again, and `/healthz` reports it. A study that fails (its
runner raised, or another coordinator took its lease) is dropped at once: not one more launch.

One module on purpose, although a little over the size rule: it is one thread's state machine,
and discovery, adoption and the failure handling all read and change the same slots and status.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import exc as sa_exc

from autotuner.executors.base import Completed, Executor, ExecutorUnavailable
from autotuner.storage.models import Study, StudyStatus
from autotuner.storage.session import Database, DatabaseUnavailable
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import StudyRunner
from autotuner.study.pause import WaitingForGpus

log = logging.getLogger(__name__)

# Errors that mean "the database is unreachable right now", not "this study is broken".
DB_ERRORS = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.TimeoutError,
    DatabaseUnavailable,
)
ROUND_ERROR_BACKOFF_S = 1.0  # after a round that raised, wait this long (doubling, to 30 s)
# A round that has not ended for this long is stuck (a cluster call that never returns): the
# service is unhealthy. The longest a round takes otherwise is a study's end (its evidence,
# seconds) or dropping a dead Ray connection (ray.shutdown: 5 s with the GCS gone).
STUCK_ROUND_S = 120.0
WAITING_RETRY_S = 5.0  # a GPU study adopted while the cluster has no GPU: look again after
DRAIN_REASON = "interrupted: the service stopped (drain)"
# Scheduler states in which it runs no trial: /healthz says 503 (with `last_error`).
NOT_RUNNING = ("starting", "error", "stopped", "cluster unavailable")


@dataclass
class _Slot:
    runner: StudyRunner
    backlog: list[Completed] = field(default_factory=list)  # results not yet stored


class Scheduler:
    """Runs many studies at once over one executor, in one background thread."""

    def __init__(
        self,
        db: Database,
        make_executor: Callable[[], Executor],
        *,
        owner: str,
        poll_s: float = 0.5,
        discover_s: float = 2.0,
        lease_ttl_s: float = 60.0,
        heartbeat_interval_s: float = 5.0,
    ) -> None:
        self.db = db
        self.make_executor = make_executor
        self.owner = owner
        self.poll_s = poll_s
        self.discover_s = discover_s
        self.lease_ttl_s = lease_ttl_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.executor: Executor | None = None
        self.state = "starting"  # starting | running | database unavailable | stopped | error
        self.last_error: str | None = None
        self._slots: dict[str, _Slot] = {}
        self._blocked: dict[str, float] = {}  # study id -> monotonic time to try again
        self._last_served: str | None = None  # round-robin: the next turn is after it
        self._last_discover = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._db_down_since: float | None = None
        self._last_round_at: float | None = None  # monotonic time the last round ended
        self._cluster_failed = False  # a call of this round found the cluster unavailable
        self._hand_over = False  # how the studies are left on stop (see `stop`)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="autotuner-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0, *, hand_over: bool = False) -> None:
        """Stop launching, cancel what runs, and store every study it ran as interrupted, its
        lease given back (graceful shutdown). The cancelled trials are stored as interrupted
        (lost: `autotuner resume` runs each again); nothing is left `running`.

        `hand_over`: the studies stay running instead, their cancelled trials lost, for the
        next coordinator to take up at once (a service that exits for its supervisor to
        restart it, `serve --exit-after-raylet-lost`: nobody would run `autotuner resume`).
        """
        if not self._stop.is_set():  # the first stop decides how (the app stops it again)
            self._hand_over = hand_over
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def wake(self) -> None:
        """Look for new studies now (the API calls this after a submit or a cancel)."""
        self._last_discover = 0.0
        self._wake.set()

    @property
    def healthy(self) -> bool:
        """The thread is alive, its executor can run trials, its last round did not fail and
        the current one is not stuck."""
        alive = self._thread is not None and self._thread.is_alive()
        return alive and self.state not in NOT_RUNNING and self._stuck_s() is None

    def _stuck_s(self) -> float | None:
        """Seconds since the last round ended, where that is past STUCK_ROUND_S."""
        last = self._last_round_at
        age = None if last is None else time.monotonic() - last
        return age if age is not None and age > STUCK_ROUND_S else None

    def status(self) -> dict[str, Any]:
        in_flight = sum(len(s.runner.in_flight) for s in list(self._slots.values()))
        thread_alive = self._thread is not None and self._thread.is_alive()
        if self._thread is not None and not thread_alive and self.state != "stopped":
            state = "error"  # the thread died outside every guard: a bug, said plainly
        else:
            state = self.state
        last = self._last_round_at
        last_error = self.last_error
        if (stuck := self._stuck_s()) is not None and state == "running":
            last_error = f"no coordinator round has ended for {stuck:.0f} s: it is stuck"
        return {
            "state": state,
            "healthy": self.healthy,
            "thread_alive": thread_alive,
            "last_round_age_s": None if last is None else round(time.monotonic() - last, 1),
            "owner": self.owner,
            "studies_running": len(self._slots),
            "trials_in_flight": in_flight,
            "last_error": last_error,
        }

    def target(self) -> Any:
        """The executor's hardware, once the executor is up (None before)."""
        return self.executor.target() if self.executor is not None else None

    # ------------------------------------------------------------------ the loop

    def _main(self) -> None:
        try:
            self.executor = self._connect()
            if self.executor is None:
                return
            self.state = "running"
            self._last_round_at = time.monotonic()  # a first round that never ends is stuck too
            backoff = ROUND_ERROR_BACKOFF_S
            while not self._stop.is_set():
                try:
                    self.tick()
                except DB_ERRORS as exc:
                    self._database_down(exc)
                except ExecutorUnavailable as exc:
                    self._executor_down(exc)
                except Exception as exc:  # a bug in a round: say so loudly, keep going
                    log.exception("a coordinator round failed; retrying in %.0f s", backoff)
                    self.state, self.last_error = "error", f"{type(exc).__name__}: {exc}"
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 30.0)
                    continue
                backoff = ROUND_ERROR_BACKOFF_S
                self._last_round_at = time.monotonic()
                # The cluster is back only once a round ran with no call failing on it.
                back = self.state == "cluster unavailable" and not self._cluster_failed
                if self.state == "error" or back:
                    self.state = "running"
        except BaseException as exc:
            log.exception("the coordinator stopped")
            self.state, self.last_error = "error", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._shutdown()

    def _connect(self) -> Executor | None:
        delay = 1.0
        while not self._stop.is_set():
            try:
                return self.make_executor()
            except Exception as exc:
                self.last_error = f"cannot start the executor: {type(exc).__name__}: {exc}"
                log.error("%s; retrying in %.0f s", self.last_error, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 30.0)
        return None

    def tick(self) -> None:
        """One round: discover, collect, record, then hand out free slots round-robin."""
        assert self.executor is not None
        self._cluster_failed = False
        why = self.executor.health()  # also re-makes a dead cluster connection
        if why is not None:
            # Said by /healthz; the studies pause on their own (StudyRunner.advance), and the
            # round goes on: the trials the failure took are recorded as lost.
            self._executor_down(ExecutorUnavailable(why), wait=False)
        now = time.monotonic()
        if now - self._last_discover >= self.discover_s:
            self._discover()
            self._last_discover = time.monotonic()
        if not self._slots:
            self._wake.wait(self.discover_s)
            self._wake.clear()
            return
        self._route(self.executor.collect(timeout_s=self.poll_s))
        order = self._order()
        for slot in order:  # record results, honour cancels, keep leases: no launching yet
            pending, slot.backlog = slot.backlog, []
            self._guard(slot, partial(slot.runner.advance, pending, max_launches=0), pending)
        progressed = True
        while progressed and not self._stop.is_set():
            progressed = False
            for slot in order:
                runner = slot.runner
                # A study that failed in this round (dropped from _slots) launches nothing more.
                if self._slots.get(runner.study_id) is not slot or not runner.wants_trials:
                    continue
                if self.executor.free_slots(runner.gpus_per_trial) <= 0:
                    continue
                if self._guard(slot, partial(runner.launch, 1)):
                    progressed = True
                    self._last_served = runner.study_id
        for study_id in [k for k, s in self._slots.items() if s.runner.done]:
            del self._slots[study_id]
            log.info("study %s finished", study_id)
        if not any(s.runner.in_flight for s in self._slots.values()):
            # Nothing runs (e.g. every study waits for a slot it cannot get): don't spin.
            self._wake.wait(self.poll_s)
            self._wake.clear()

    def _order(self) -> list[_Slot]:
        """The studies in turn order: starting after the last one that got a slot."""
        slots = list(self._slots.values())
        ids = [slot.runner.study_id for slot in slots]
        start = ids.index(self._last_served) + 1 if self._last_served in ids else 0
        return slots[start:] + slots[:start]

    def _route(self, completed: list[Completed]) -> None:
        owners = {h: slot for slot in self._slots.values() for h in slot.runner.in_flight}
        for item in completed:
            slot = owners.get(item.handle)
            if slot is None:
                log.info("discarding the result of %s: no study waits for it", item.handle)
                continue
            slot.backlog.append(item)

    def _guard(
        self, slot: _Slot, action: Callable[[], Any], pending: Sequence[Completed] = ()
    ) -> Any:
        """Run one runner action; a database outage defers it, a bug fails that study only."""
        try:
            result = action()
        except (*DB_ERRORS, ExecutorUnavailable) as exc:
            # Results not yet stored are still in the runner's in_flight: store them next round.
            slot.backlog = [c for c in pending if c.handle in slot.runner.in_flight] + slot.backlog
            if isinstance(exc, ExecutorUnavailable):
                self._executor_down(exc)
            else:
                self._database_down(exc)
            return 0
        except Exception as exc:
            self._fail(slot, exc)
            return 0
        self._database_up()
        return result

    # ------------------------------------------------------------------ discovery

    def _discover(self) -> None:
        try:
            with self.db.session() as s:
                # Trials a dead coordinator left running in a study that has ended since (it
                # was cancelled while that coordinator held it): ended here, not kept forever.
                for trial in TrialRepo(s).end_abandoned():
                    log.info(
                        "study %s: trial #%d %s", trial.study_id, trial.number, trial.error_message
                    )
                ids = StudyRepo(s).unfinished_ids()
        except DB_ERRORS as exc:
            self._database_down(exc)
            return
        self._database_up()
        now = time.monotonic()
        for study_id in ids:
            if study_id in self._slots or self._blocked.get(study_id, 0.0) > now:
                continue
            self._adopt(study_id)

    def _adopt(self, study_id: str) -> None:
        assert self.executor is not None
        runner = StudyRunner(
            self.db,
            study_id,
            self.executor,
            owner=self.owner,
            heartbeat_interval_s=self.heartbeat_interval_s,
            lease_ttl_s=self.lease_ttl_s,
            poll_s=self.poll_s,
        )
        try:
            runner.start()
        except DB_ERRORS as exc:
            self._database_down(exc)
            return
        except ExecutorUnavailable as exc:
            self._executor_down(exc)
            return
        except WaitingForGpus as exc:
            # Its GPUs are not in the cluster: the study row says so; look again shortly.
            log.info("study %s: %s", study_id, exc)
            self._blocked[study_id] = time.monotonic() + WAITING_RETRY_S
            return
        except Exception as exc:
            if isinstance(exc, RuntimeError) and "another coordinator" in str(exc):
                # Another coordinator holds the lease (or a dead one's has not expired yet).
                log.info("%s", exc)
                self._blocked[study_id] = time.monotonic() + min(self.lease_ttl_s / 4, 15.0)
            else:
                self._fail(_Slot(runner), exc)
            return
        self._blocked.pop(study_id, None)
        if not runner.done:
            self._slots[study_id] = _Slot(runner)
            log.info("running study %s", study_id)

    # ------------------------------------------------------------------ failures

    def _database_down(self, exc: BaseException) -> None:
        if self._db_down_since is None:
            self._db_down_since = time.monotonic()
            log.warning("database unavailable (%s); retrying", str(exc).splitlines()[0][:200])
        self.state = "database unavailable"
        self.last_error = str(exc).splitlines()[0][:500]
        self._stop.wait(min(self.poll_s * 2, 1.0))

    def _executor_down(self, exc: BaseException, *, wait: bool = True) -> None:
        message = (str(exc).splitlines() or [type(exc).__name__])[0]
        if self.state != "cluster unavailable" or self.last_error != message[:500]:
            log.warning("cluster unavailable (%s); retrying", message[:200])
        self._cluster_failed = True
        self.state = "cluster unavailable"
        self.last_error = message[:500]
        if wait:
            self._stop.wait(min(self.poll_s * 2, 1.0))

    def _database_up(self) -> None:
        if self._db_down_since is not None:
            log.warning("database back after %.1f s", time.monotonic() - self._db_down_since)
            self._db_down_since = None
            self.state = "running"

    def _fail(self, slot: _Slot, exc: Exception) -> None:
        """A study whose runner raised (a bug, or a lost lease) stops; the others go on."""
        runner = slot.runner
        runner.done = True  # whatever happens below, this runner launches nothing more
        self._slots.pop(runner.study_id, None)
        for handle in list(runner.in_flight):
            if self.executor is not None:
                try:
                    self.executor.cancel(handle)
                except ExecutorUnavailable:
                    log.warning("could not cancel %s: the cluster is unavailable", handle)
        message = f"{type(exc).__name__}: {exc}"
        try:
            with self.db.session() as s:
                study = s.get(Study, runner.study_id, with_for_update=True)
                if study is None or study.owner != self.owner:
                    # Not ours any more (taken over, or finished and released by whoever took
                    # it): a stale coordinator writes nothing.
                    log.warning(
                        "study %s: %s; this coordinator no longer holds it",
                        runner.study_id,
                        message,
                    )
                    return
                log.error("study %s failed: %s", runner.study_id, message, exc_info=exc)
                # Its running trials are ours and will never report: lost, like a dead worker.
                far = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
                TrialRepo(s).mark_lost(runner.study_id, heartbeat_older_than=far)
                studies = StudyRepo(s)
                studies.set_status(
                    study,
                    StudyStatus.FAILED,
                    error_message=f"the coordinator failed on this study: {message}"[:2000],
                )
                studies.release(runner.study_id, self.owner)
        except DB_ERRORS as db_exc:
            self._database_down(db_exc)
            self._blocked[runner.study_id] = 0.0  # try it again once the database is back

    def _shutdown(self) -> None:
        slots = list(self._slots.values())
        self._slots.clear()
        for slot in slots:
            # Cancelled and stored as interrupted: a drained service's studies wait for
            # `autotuner resume` rather than run again whenever a service next starts; one
            # that exits to be restarted hands them over to its next start instead.
            try:
                if self._hand_over:
                    slot.runner.hand_over()
                else:
                    slot.runner.interrupt(DRAIN_REASON)
            except DB_ERRORS:
                # The lease simply expires; a service adopts the study then and marks its
                # running trials lost, as after a crash.
                log.warning(
                    "study %s: the database is down; not stored as stopped",
                    slot.runner.study_id,
                )
            except Exception:  # one study's failure must not keep the others or Ray up
                log.exception("study %s: storing the interrupt", slot.runner.study_id)
        if self.executor is not None:
            try:  # a local Ray cluster must not outlive the service that started it
                self.executor.close()
            except Exception:
                log.exception("closing the executor")
        if self.state != "error":
            self.state = "stopped"
