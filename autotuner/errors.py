"""The exception every layer raises for bad user input (autotuner.inputs re-exports it).

A module of its own, importing nothing: the CLI's service client and error handling need the
class, and importing it from autotuner.inputs loaded YAML and the spec's pydantic models into
every `autotuner` read (100 ms of a cold `autotuner best --server`).
"""


class UserError(ValueError):
    """Bad input from the user; the message names what was wrong and how to fix it."""
