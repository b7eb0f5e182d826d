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
