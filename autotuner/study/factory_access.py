"""Which model factories a study may run (`model.factory`, family "factory").

A factory is code: the trial process imports it and calls it. `autotuner tune` and a local
`submit` run as the user, who runs their own code: any factory they can import. The service
runs trials for whoever holds its token, so it runs only code its operator put in a directory
it allowed (`serve --factory-dir DIR`, repeatable, or $AUTOTUNER_FACTORY_DIRS), and none by
default: a `sympy:simplify` or `/tmp/x.py:fn` factory would otherwise be code execution on
every worker for anyone with the token (docs/trust-model.md).

- `/abs/path/file.py:function`: the file must lie under an allowed directory, as written and
  with its links resolved (autotuner/study/allowed_dirs.py); the refusal is the same text
  whether an outside file exists or not.
- `package.module:function`: the module must be a `.py` file (or a package's `__init__.py`)
  under an allowed directory, found by its dotted name as a relative path there; nothing is
  imported on the service. A top-level name of the standard library or of this project is
  refused: the worker would import that instead.

An accepted spec is pinned to what was checked: a file factory to its resolved path, and both
forms carry `factory_root`, the allowed directory (resolved) the worker imports from and
checks the imported file against (workers/models/factory.py), so a link changed after the
submit, or a same-named module elsewhere on the worker's path, is refused there too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from autotuner.inputs import UserError
from autotuner.spec import ModelSpec
from autotuner.study.allowed_dirs import (
    from_flags_and_env,
    lies_under,
    named_dirs,
    real_dirs,
    root_of,
)

ENV_VAR = "AUTOTUNER_FACTORY_DIRS"
# Top-level names the worker imports from its own installation whatever an allowed directory
# holds (already imported by a trial, or the project's own packages).
_RESERVED = frozenset({"autotuner", "workers", "torch", "numpy", "triton", "transformers"})


class FactoryNotAllowed(UserError):
    """The service may not run the factory a request names; the message says how to allow it."""


def _how_to_allow() -> str:
    return (
        "the service's operator allows a directory of model code with `autotuner serve "
        f"--factory-dir DIR` (repeatable) or {ENV_VAR}=DIR1{os.pathsep}DIR2"
    )


@dataclass(frozen=True)
class FactoryAccess:
    """The directories factories may come from; `dirs=None` means any (the local CLI)."""

    dirs: tuple[Path, ...] | None
    real_dirs: tuple[Path, ...] = ()

    @classmethod
    def anywhere(cls) -> FactoryAccess:
        """`tune` and a local `submit`: the user runs their own code as themselves."""
        return cls(None)

    @classmethod
    def nowhere(cls) -> FactoryAccess:
        """A service whose operator allowed no directory: every factory is refused."""
        return cls(())

    @classmethod
    def under(cls, dirs: Iterable[str | Path]) -> FactoryAccess:
        named = named_dirs(dirs, what="factory", flag="--factory-dir", env_var=ENV_VAR)
        return cls(named, real_dirs(named)) if named else cls.nowhere()

    @classmethod
    def for_service(cls, flags: Iterable[str] | None, env: str | None) -> FactoryAccess:
        """`serve`'s directories: every --factory-dir plus each entry of $AUTOTUNER_FACTORY_DIRS."""
        return cls.under(from_flags_and_env(flags, env))

    def describe(self) -> str:
        """One line for the service's start-up log."""
        if self.dirs is None:
            return "any"
        if not self.dirs:
            return "none (factory models are refused; --factory-dir DIR allows one)"
        return "only from " + ", ".join(map(str, self.dirs))

    def check(self, spec: ModelSpec) -> ModelSpec:
        """`spec` with its factory pinned to the allowed file it names, or FactoryNotAllowed."""
        if spec.factory is None or self.dirs is None:
            return spec
        if not self.dirs:
            raise FactoryNotAllowed(
                "model.factory: this service runs no model code of its own: its operator "
                "allowed no factory directory. Use a preset, explicit sizes or hf_config, or "
                f"ask for a directory: {_how_to_allow()}. (`autotuner tune` on your own machine "
                "runs any factory you can import.)"
            )
        location, _, function = spec.factory.rpartition(":")
        if location.endswith(".py"):
            file = self._file(spec.factory, location)
        else:
            file = self._module_file(spec.factory, location)
        root = root_of(file, self.real_dirs)
        assert root is not None  # lies_under held for the resolved path
        pinned = f"{os.path.realpath(file)}:{function}" if location.endswith(".py") else None
        return spec.model_copy(
            update={"factory": pinned or spec.factory, "factory_root": str(root)}
        )

    def _file(self, ref: str, location: str) -> str:
        # Decided on the text first: an outside path is refused before anything is asked.
        if not lies_under(location, self.dirs or (), self.real_dirs):
            raise self._outside(ref)
        if not os.path.isfile(location):
            raise FactoryNotAllowed(
                f"model.factory {ref!r}: no such file under the factory directories; put the "
                "model code there (the workers open the same path)"
            )
        return location

    def _module_file(self, ref: str, module: str) -> str:
        parts = module.split(".")
        if parts[0] in _RESERVED or parts[0] in sys.stdlib_module_names:
            raise self._outside(ref)
        for root in self.dirs or ():
            base = root.joinpath(*parts)
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                path = str(candidate)
                if lies_under(path, self.dirs or (), self.real_dirs) and os.path.isfile(path):
                    return path
        raise self._outside(ref)

    def _outside(self, ref: str) -> FactoryNotAllowed:
        assert self.dirs is not None
        # The factory as the caller wrote it, never where it resolved: that would tell them
        # where links on the server lead.
        return FactoryNotAllowed(
            f"model.factory {ref!r}: not model code under a directory this service runs code "
            f"from ({', '.join(map(str, self.dirs))}): give '/abs/path/file.py:function' under "
            "one of them, or 'module:function' for a module file there (symlinks and '..' are "
            f"resolved before this check); or {_how_to_allow()}"
        )
