"""`autotuner resume`: an interrupted study run on where it stopped (study/resume.py)."""

from __future__ import annotations

from autotuner.cli.common import (
    DbOption,
    JsonFlag,
    RayAddressOption,
    ServerOption,
    StudyArg,
    friendly_errors,
    open_db_for_writing,
    out,
    safe,
)
from autotuner.cli.render import print_json


@friendly_errors
def resume(
    study: StudyArg,
    server: ServerOption = None,
    ray_address: RayAddressOption = None,
    db: DbOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Continue an interrupted study where it stopped.

    Ctrl-C or SIGTERM of `tune`, or a service's drain, interrupts a study. It goes on with its
    trials, its budget left and its seeds; the trials cut short run again. The same `tune`
    command run again does the same.

    Here, it runs in this process as `tune` does (a local Ray, or --ray-address). With
    --server, the service's coordinator runs it: a service never runs an interrupted study
    unless asked so.
    """
    if server and server.strip():
        from autotuner.cli.client import connect

        view = connect(server, None).resume(study)  # type: ignore[attr-defined]
        if as_json:
            print_json(view)
        else:
            out.print(f"study {safe(view['id'])} resumed on the service", highlight=False)
        return
    database = open_db_for_writing(db)

    from autotuner.cli.tune import run_here, start_ray
    from autotuner.cli.tune_resume import say_resumed
    from autotuner.study.coordinator import default_owner
    from autotuner.study.resume import resume_study

    owner = default_owner()
    executor = start_ray(ray_address, as_json)
    # Queued again with our lease taken in one transaction: a service sharing the database
    # cannot adopt it before this process runs it.
    view = resume_study(database, study, owner=owner)
    resumed = say_resumed(database, view, as_json)
    run_here(database, view["id"], executor, owner, view.get("max_trials"), as_json, resumed)
