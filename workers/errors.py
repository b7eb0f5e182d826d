"""Exceptions a trial raises on purpose; workers/failures.py maps them to failure classes."""


class UnsupportedConfig(Exception):
    """No kernel or feature for this config on this worker. The message says how to fix it."""


class NumericsError(Exception):
    """The loss went non-finite, or did not decrease: the config does not train."""
