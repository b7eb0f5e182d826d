"""`autotuner serve`: the service, i.e. the JSON API and the coordinator in one process."""

from __future__ import annotations

import sys
from typing import Annotated

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
    import logging
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
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        log_level=log_level.lower(),
        timeout_graceful_shutdown=10,
    )
