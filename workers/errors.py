"""Exceptions a trial raises on purpose; workers/failures.py maps them to failure classes."""

from __future__ import annotations

from typing import Any


class UnsupportedConfig(Exception):
    """No kernel or feature for this config on this worker. The message says how to fix it.

    `knobs` names the knob values that cause it (TrialResult.unsupported_knobs), so the search
    can rule out exactly that combination; None when no knob value is to blame.
    """

    def __init__(self, message: str, knobs: dict[str, Any] | None = None):
        super().__init__(message)
        self.knobs = knobs


class NumericsError(Exception):
    """The loss went non-finite, or did not decrease: the config does not train."""


class PeerFailed(Exception):
    """Another rank of a multi-GPU trial reported a failure; this rank reports nothing."""


class EnvironmentProblem(Exception):
    """This worker cannot run any config of the study: a package the model needs is missing,
    CUDA was asked for and is not there, the driver does not match. No knob value is to blame,
    so the search learns nothing from it; the message says what to install or fix."""


def missing_package(exc: ImportError, needed_for: str, remedy: str) -> EnvironmentProblem:
    """The EnvironmentProblem for an import that failed on this worker: which package (the
    module Python could not find, where it says), what needs it, and how to install it."""
    package = (exc.name or "").split(".")[0] or "a module"
    return EnvironmentProblem(
        f"the worker cannot import {package} ({type(exc).__name__}: {exc}), which {needed_for} "
        f"needs: {remedy}"
    )
