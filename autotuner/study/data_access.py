"""Which user data paths a study may read (`data`, `measure.data`).

`autotuner tune` runs as the user, on the user's machine: it reads any path the user can read.
The service reads files as *its* account for whoever holds the token, and its answer to a
submit tells the caller whether a path exists and what is in it (`datafiles.inspect`: "no such
file", "4,098 bytes is not a whole number of tokens", the largest token id...). So the service
reads data only under directories its operator allowed (`serve --data-dir DIR`, repeatable, or
$AUTOTUNER_DATA_DIRS), and none by default.

The check (autotuner/study/allowed_dirs.py, shared with the model factories' directories)
decides on the path as written first, so the refusal of an outside path is the same text whether
it exists or not, then on the path with its links resolved. A text file's tokenizer is a path
the service opens too (its vocabulary size is read at submit): it is held to the same rule.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from autotuner.inputs import UserError
from autotuner.spec import DataFile
from autotuner.study.allowed_dirs import (
    from_flags_and_env,
    lies_under,
    named_dirs,
    real_dirs,
)

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
        """Only under `dirs`, each an existing directory (checked now, at the service's start)."""
        named = named_dirs(dirs, what="data", flag="--data-dir", env_var=ENV_VAR)
        if not named:
            return cls.nowhere()
        return cls(named, real_dirs(named))

    @classmethod
    def for_service(cls, flags: Iterable[str] | None, env: str | None) -> DataAccess:
        """`serve`'s directories: every --data-dir plus each entry of $AUTOTUNER_DATA_DIRS
        (separated by os.pathsep, like PATH)."""
        return cls.under(from_flags_and_env(flags, env))

    def describe(self) -> str:
        """One line for the service's start-up log."""
        if self.dirs is None:
            return "any path"
        if not self.dirs:
            return "none (requests naming data are refused; --data-dir DIR allows one)"
        return "only under " + ", ".join(map(str, self.dirs))

    def check_file(self, data: DataFile) -> None:
        """Refuse a data file whose path or tokenizer lies outside the allowed directories:
        both are opened by the service at submit and by the workers."""
        self.check(data.path)
        if data.tokenizer is not None:
            self.check(data.tokenizer, field="data.tokenizer")

    def check(self, path: str, *, field: str = "data") -> None:
        """Refuse `path` unless it lies under an allowed directory, written and resolved."""
        if self.dirs is None:
            return
        if not self.dirs:
            raise DataNotAllowed(
                "data: this service reads no user data: its operator allowed no data directory. "
                "Leave data out to measure on synthetic tokens, or ask for a directory: "
                f"{_how_to_allow()}. (`autotuner tune` on your own machine reads any path you can.)"
            )
        # Decided on the text first, so the answer says nothing about what exists outside.
        if not lies_under(path, self.dirs, self.real_dirs):
            raise self._outside(path, field)

    def _outside(self, path: str, field: str) -> DataNotAllowed:
        assert self.dirs is not None
        # The path as the caller wrote it, never what it resolved to: a resolved path would
        # tell them where links on the server lead.
        return DataNotAllowed(
            f"{field} {path!r}: not under a directory this service reads data from "
            f"({', '.join(map(str, self.dirs))}; symlinks and '..' are resolved before this "
            f"check). Put the data under one of them, or {_how_to_allow()}"
        )
