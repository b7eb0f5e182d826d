"""Which user data paths a study may read (`data`, `measure.data`).

`autotuner tune` runs as the user, on the user's machine: it reads any path the user can read.
The service reads files as *its* account for whoever holds the token, and its answer to a
submit tells the caller whether a path exists and what is in it (`datafiles.inspect`: "no such
file", "4,098 bytes is not a whole number of tokens", the largest token id...). So the service
reads data only under directories its operator allowed (`serve --data-dir DIR`, repeatable, or
$AUTOTUNER_DATA_DIRS), and none by default.

The check decides before the file system is asked anything about the path: the path as written
(with `..` folded) must lie under an allowed directory, so the refusal of an outside path is the
same text whether it exists or not. Then symlinks are resolved and the real path must lie under
an allowed directory's real path too, so a link inside one cannot lead out of it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from autotuner.inputs import UserError

ENV_VAR = "AUTOTUNER_DATA_DIRS"


class DataNotAllowed(UserError):
    """The service may not read the data path a request names; the message says how to allow it."""


def _how_to_allow() -> str:
    return (
        f"the service's operator allows a directory with `autotuner serve --data-dir DIR` "
        f"(repeatable) or {ENV_VAR}=DIR1{os.pathsep}DIR2"
    )


@dataclass(frozen=True)
class DataAccess:
    """The directories data may be read from; `dirs=None` means any path (the local CLI)."""

    dirs: tuple[Path, ...] | None
    real_dirs: tuple[Path, ...] = ()

    @classmethod
    def anywhere(cls) -> DataAccess:
        """`tune` and a local `submit`: the user reads their own files as themselves."""
        return cls(None)

    @classmethod
    def nowhere(cls) -> DataAccess:
        """A service whose operator allowed no directory: every `data` is refused."""
        return cls(())

    @classmethod
    def under(cls, dirs: Iterable[str | Path]) -> DataAccess:
        """Only under `dirs`, each an existing directory (checked now, at the service's start:
        a typo would otherwise refuse every submit with a message naming a directory that
        is not there)."""
        named: list[Path] = []
        for raw in dirs:
            text = str(raw).strip()
            if not text:
                continue
            if not os.path.isabs(os.path.expanduser(text)):
                raise UserError(
                    f"data directory {text!r} is relative; give an absolute path (the workers "
                    "open the same path, and their working directory is not this one)"
                )
            path = Path(os.path.normpath(os.path.expanduser(text)))
            if not path.is_dir():
                raise UserError(
                    f"data directory {path}: no such directory; create it, or fix the path "
                    f"given to --data-dir or {ENV_VAR}"
                )
            if path not in named:
                named.append(path)
        if not named:
            return cls.nowhere()
        return cls(tuple(named), tuple(Path(os.path.realpath(p)) for p in named))

    @classmethod
    def for_service(cls, flags: Iterable[str] | None, env: str | None) -> DataAccess:
        """`serve`'s directories: every --data-dir plus each entry of $AUTOTUNER_DATA_DIRS
        (separated by os.pathsep, like PATH)."""
        from_env = env.split(os.pathsep) if env else []
        return cls.under([*(flags or []), *from_env])

    def describe(self) -> str:
        """One line for the service's start-up log."""
        if self.dirs is None:
            return "any path"
        if not self.dirs:
            return "none (requests naming data are refused; --data-dir DIR allows one)"
        return "only under " + ", ".join(map(str, self.dirs))

    def check(self, path: str) -> None:
        """Refuse `path` unless it lies under an allowed directory, written and resolved."""
        if self.dirs is None:
            return
        if not self.dirs:
            raise DataNotAllowed(
                "data: this service reads no user data: its operator allowed no data directory. "
                "Leave data out to measure on synthetic tokens, or ask for a directory: "
                f"{_how_to_allow()}. (`autotuner tune` on your own machine reads any path you can.)"
            )
        # Decided on the text alone, so the answer says nothing about what exists outside.
        written = PurePosixPath(os.path.normpath(path))
        if "\0" in path or not _inside(written, (*self.dirs, *self.real_dirs)):
            raise self._outside(path)
        if not _inside(Path(os.path.realpath(path)), self.real_dirs):
            raise self._outside(path)

    def _outside(self, path: str) -> DataNotAllowed:
        assert self.dirs is not None
        # The path as the caller wrote it, never what it resolved to: a resolved path would
        # tell them where links on the server lead.
        return DataNotAllowed(
            f"data {path!r}: not under a directory this service reads data from "
            f"({', '.join(map(str, self.dirs))}; symlinks and '..' are resolved before this "
            f"check). Put the data under one of them, or {_how_to_allow()}"
        )


def _inside(path: PurePosixPath | Path, dirs: Iterable[Path]) -> bool:
    return any(PurePosixPath(path).is_relative_to(PurePosixPath(d)) for d in dirs)
