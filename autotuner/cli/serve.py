"""`autotuner serve`: the service, i.e. the JSON API and the coordinator in one process."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Annotated, Any

import typer

from autotuner.cli.common import DbOption, RayAddressOption, friendly_errors


@friendly_errors
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    db: DbOption = None,
    ray_address: RayAddressOption = None,
    # One-sided flags (the defaults need no flag of their own): a --migrate/--no-migrate pair
    # takes a column of its own in --help, which at 80 columns left the help text 18 a line.
    no_migrate: Annotated[
        bool,
        typer.Option(
            "--no-migrate",
            help="Leave the schema as it is on start (a separate step runs `alembic upgrade "
            "head`). Default: bring it to the latest revision.",
        ),
    ] = False,
    no_coordinator: Annotated[
        bool,
        typer.Option(
            "--no-coordinator", help="Serve the API only; run no studies in this process."
        ),
    ] = False,
    coordinator_id: Annotated[
        str | None,
        typer.Option(
            envvar="AUTOTUNER_COORDINATOR_ID",
            help="Lease owner id of this coordinator; default serve@HOST:PORT. A restarted "
            "service with the same id takes its studies back at once; a second running "
            "service with it is refused at start.",
        ),
    ] = None,
    executor: Annotated[
        str, typer.Option(hidden=True, envvar="AUTOTUNER_EXECUTOR", help="ray | replay:FILE")
    ] = "ray",
    lease_ttl: Annotated[float, typer.Option(hidden=True, min=2.0)] = 60.0,
    heartbeat_interval: Annotated[float, typer.Option(hidden=True, min=0.1)] = 5.0,
    public_reads: Annotated[
        bool,
        typer.Option(
            "--public-reads",
            envvar="AUTOTUNER_PUBLIC_READS",
            help="Let anyone who reaches the port read studies and the dashboard; changes "
            "still need the token. Default: with a token set, reads need it too.",
        ),
    ] = False,
    data_dir: Annotated[
        list[str] | None,
        typer.Option(
            "--data-dir",
            help="Let studies read user data (`data` and its tokenizer, --data) under DIR; repeat "
            "for several. "
            "Also $AUTOTUNER_DATA_DIRS (DIR1:DIR2). Symlinks and '..' are resolved before "
            "the check, and a path outside is refused without saying whether it exists. "
            "Default: none, and every request naming data is refused.",
            show_default=False,
        ),
    ] = None,
    factory_dir: Annotated[
        list[str] | None,
        typer.Option(
            "--factory-dir",
            help="Let studies run model code (`model.factory`) from DIR: a file.py under it, "
            "or a module whose file is there; repeat for several. Also "
            "$AUTOTUNER_FACTORY_DIRS (DIR1:DIR2). A factory is code the workers run for "
            "whoever holds the token. Default: none, and every factory model is refused.",
            show_default=False,
        ),
    ] = None,
    exit_after_raylet_lost: Annotated[
        float | None,
        typer.Option(
            envvar="AUTOTUNER_RAYLET_EXIT_S",
            min=1.0,
            metavar="SECONDS",
            help="Exit with code 75 (EX_TEMPFAIL) once no raylet of the Ray cluster has run on "
            "this host for SECONDS, its studies left for the next start. For a supervisor "
            "that restarts the service with its raylet (docker-compose.yml: `ray start`, "
            "then `serve`). Default: wait for one at /healthz 503, however long; a local "
            "cluster of serve's own is started again instead.",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the service: coordinator, JSON API (/docs) and dashboard.

    With $AUTOTUNER_TOKEN set, every call needs it as a bearer token, reads
    included (browsers sign in at /login), unless --public-reads. Listening
    beyond localhost needs a token of 32 characters or more. Studies a
    crashed previous run left unfinished are picked up again on start; those
    a drain (SIGTERM) interrupted wait for `autotuner resume STUDY --server`.

    The service reads a study's own token data only under the directories
    given with --data-dir or $AUTOTUNER_DATA_DIRS, and runs model factories
    only from --factory-dir or $AUTOTUNER_FACTORY_DIRS (none of either by
    default); `tune` on your own machine reads and runs what you can.
    Trials never see the service's token or database URL
    (docs/trust-model.md).
    """
    import os

    token = os.environ.get("AUTOTUNER_TOKEN") or None
    from autotuner.api.security import public_bind_refusal

    refusal = public_bind_refusal(host, token)
    if refusal is not None:
        from autotuner.inputs import UserError

        raise UserError(refusal)

    from autotuner.study import data_access as data_dirs
    from autotuner.study import factory_access as factory_dirs

    data_access = data_dirs.DataAccess.for_service(data_dir, os.environ.get(data_dirs.ENV_VAR))
    factory_access = factory_dirs.FactoryAccess.for_service(
        factory_dir, os.environ.get(factory_dirs.ENV_VAR)
    )
    # The workers of a Ray this service starts inherit the directories (empty: none) and
    # refuse a factory config that did not pass this service's check (workers/models/factory).
    os.environ[factory_dirs.ENV_VAR] = os.pathsep.join(map(str, factory_access.dirs or ()))

    import uvicorn

    from autotuner.api.app import ServiceSettings, create_app
    from autotuner.storage.session import resolve_database_url

    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    db_url = resolve_database_url(db)
    from autotuner.storage.session import Database

    database = Database(db_url)
    database.check()  # an unreachable database is one clear line, not a traceback
    settings = ServiceSettings(
        db_url=db_url,
        token=token,
        public_reads=public_reads,
        executor=executor,
        ray_address=ray_address,
        owner=coordinator_id,
        port=port,
        coordinator=not no_coordinator,
        migrate=not no_migrate,
        lease_ttl_s=lease_ttl,
        heartbeat_interval_s=heartbeat_interval,
        data_access=data_access,
        factory_access=factory_access,
    )
    if settings.coordinator:
        # Claimed before listening, so a second service under this id refuses to start with
        # one line (CoordinatorClash) instead of a failed start-up's traceback.
        from autotuner.storage.session import upgrade_database

        if settings.migrate:
            upgrade_database(database.url)
        settings.claim(database).take()
    app = create_app(settings)
    server = uvicorn.Server(
        uvicorn.Config(
            app, host=host, port=port, log_level=log_level.lower(), timeout_graceful_shutdown=10
        )
    )
    watch = None
    if settings.coordinator and exit_after_raylet_lost is not None:
        watch = RayletWatch(app, server, exit_after_raylet_lost)
        threading.Thread(target=watch.run, name="autotuner-raylet-watch", daemon=True).start()
    server.run()
    if watch is not None and watch.fired:
        raise typer.Exit(EX_TEMPFAIL)
    if not server.started:  # as uvicorn.run: the port was taken, or the app failed to start
        raise typer.Exit(3)


EX_TEMPFAIL = 75  # sysexits.h: a temporary failure, for its supervisor to try again
WATCH_S = 1.0  # how often the watch reads the executor (its health check runs once a second)


class RayletWatch:
    """Ends the service once no raylet of its cluster has run on this host for `limit_s`.

    The service submits through a raylet on its own host and reconnects only through one
    (executors/ray_executor.py); nothing in it starts one. Under docker compose, `ray start`
    ran once in the service's container before `serve`, and compose restarts a container that
    exits, not one that is unhealthy: without this the service waits at 503 forever. So the
    service stops as a drain does, except that its studies stay running and their leases are
    given back (`Scheduler.stop(hand_over=True)`), then exits 75: the restarted container runs
    `ray start` again and its service takes the studies up at once.
    """

    def __init__(self, app: Any, server: Any, limit_s: float) -> None:
        self.app, self.server, self.limit_s = app, server, limit_s
        self.fired = False

    def run(self) -> None:
        while not self.server.should_exit:
            time.sleep(WATCH_S)
            scheduler = getattr(self.app.state, "scheduler", None)
            executor = None if scheduler is None else scheduler.executor
            while executor is not None and hasattr(executor, "inner"):  # a test's fault wrapper
                executor = executor.inner
            lost_s = getattr(executor, "raylet_lost_s", lambda: None)()
            if scheduler is None or lost_s is None or lost_s <= self.limit_s:
                continue
            logging.getLogger("autotuner.service").error(
                "exiting with %d (EX_TEMPFAIL): no raylet of the Ray cluster has run on this "
                "host for %.0f s (--exit-after-raylet-lost %g); its supervisor restarts the "
                "service and the raylet with it (docker compose: restart: unless-stopped runs "
                "`ray start` again), and the next start takes the studies up",
                EX_TEMPFAIL,
                lost_s,
                self.limit_s,
            )
            self.fired = True
            scheduler.stop(hand_over=True)  # before the app's own stop, which interrupts
            self.server.should_exit = True
