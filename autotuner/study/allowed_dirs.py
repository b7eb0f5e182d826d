"""Directories an operator lets the service use (`serve --data-dir`, `serve --factory-dir`),
and the one test every path a request names must pass against them.

The test decides before the file system is asked anything about the path: the path as written
(with `..` folded) must lie under an allowed directory, so the refusal of an outside path is the
same text whether it exists or not. Then symlinks are resolved and the real path must lie under
an allowed directory's real path too, so a link inside one cannot lead out of it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from autotuner.inputs import UserError


def named_dirs(
    raw: Iterable[str | Path], *, what: str, flag: str, env_var: str
) -> tuple[Path, ...]:
    """The directories given, each absolute and existing (checked at the service's start: a
    typo would otherwise refuse every request with a message naming a missing directory)."""
    named: list[Path] = []
    for item in raw:
        text = str(item).strip()
        if not text:
            continue
        if not os.path.isabs(os.path.expanduser(text)):
            raise UserError(
                f"{what} directory {text!r} is relative; give an absolute path (the workers "
                "open the same path, and their working directory is not this one)"
            )
        path = Path(os.path.normpath(os.path.expanduser(text)))
        if not path.is_dir():
            raise UserError(
                f"{what} directory {path}: no such directory; create it, or fix the path "
                f"given to {flag} or {env_var}"
            )
        if path not in named:
            named.append(path)
    return tuple(named)


def from_flags_and_env(flags: Iterable[str] | None, env: str | None) -> list[str]:
    """Every flag's directory plus each entry of the variable (os.pathsep-separated, like PATH)."""
    return [*(flags or []), *(env.split(os.pathsep) if env else [])]


def real_dirs(dirs: Iterable[Path]) -> tuple[Path, ...]:
    return tuple(Path(os.path.realpath(p)) for p in dirs)


def lies_under(path: str, dirs: tuple[Path, ...], resolved: tuple[Path, ...]) -> bool:
    """Whether `path` lies under one of `dirs`, as written and once its links are resolved."""
    if "\0" in path or not os.path.isabs(path):
        return False
    written = PurePosixPath(os.path.normpath(path))
    if not inside(written, (*dirs, *resolved)):
        return False
    return inside(Path(os.path.realpath(path)), resolved)


def root_of(path: str, resolved: tuple[Path, ...]) -> Path | None:
    """The allowed directory (resolved) that holds `path` once its links are resolved."""
    real = PurePosixPath(os.path.realpath(path))
    return next((d for d in resolved if real.is_relative_to(PurePosixPath(d))), None)


def inside(path: PurePosixPath | Path, dirs: Iterable[Path]) -> bool:
    return any(PurePosixPath(path).is_relative_to(PurePosixPath(d)) for d in dirs)
