"""`tune` run again on an interrupted study: resumed where the request is the same study, refused
with the differences named where it is not (study/restore_match.py); and the one line that
`tune` and `resume` print when a study goes on."""

from __future__ import annotations

import json
from typing import Any

from autotuner.cli.common import FLAGS, as_flags, err, safe

# Differences named in the error before "and N more": enough to see what changed.
_SHOWN = 4
_VALUE_CHARS = 40


def interrupted_to_resume(database: Any, request: Any, model: Any, space: Any) -> str | None:
    """The id of the interrupted study this `tune` asks for again, or None (a new study).
    UserError, naming each difference and both ways out, where the study of that name was
    interrupted under other settings."""
    from autotuner.inputs import UserError
    from autotuner.study.restore_match import interrupted_namesake

    found = interrupted_namesake(database, request, model, space)
    if found is None:
        return None
    if not found.differences:
        return found.id
    said = [
        f"{_flag(d.field)} was {_shown(d.stored)}, now {_shown(d.asked)}"
        for d in found.differences[:_SHOWN]
    ]
    more = len(found.differences) - _SHOWN
    if more > 0:
        said.append(f"and {more} more")
    raise UserError(
        f"study {found.id} ({found.name!r}) was interrupted, and this tune asks for it with "
        f"other settings: {'; '.join(said)}. Continue it as it was with: autotuner resume "
        f"{found.id}; or start a new study with --name NEW_NAME"
    )


def say_resumed(database: Any, view: dict[str, Any], as_json: bool) -> Any:
    """`resuming study ID (name): N trials measured so far, R to run again; M of T new trials
    left, X of Y min left`, unless `as_json`; returns where the study stands, for the progress
    bar to start there (study/restore_standing.py `Standing`)."""
    from autotuner.study.restore_standing import standing

    now = standing(database, view)
    if as_json:
        return now
    said = f"{now.measured} trial{'' if now.measured == 1 else 's'} measured so far"
    if now.rerun:
        said += f", {now.rerun} to run again"
    left = []
    if now.trials_left is not None:
        left.append(f"{now.trials_left} of {view['max_trials']} new trials left")
    if now.minutes_left is not None:
        left.append(f"{now.minutes_left:.1f} of {view['max_minutes']:g} min left")
    err.print(
        f"resuming study [bold]{safe(view['id'])}[/] ({safe(view['name'])}): {said}; "
        + ", ".join(left),
        highlight=False,
    )
    return now


def _flag(field: str) -> str:
    """A request field in the words of `tune`'s flags (`max_trials`: `--trials`)."""
    return FLAGS.get(field) or as_flags(field)


def _shown(value: Any) -> str:
    text = "unset" if value is None else json.dumps(value, sort_keys=True)
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 3] + "..."
