"""Shapes and the clock every layer of the control plane shares, defined once here.

`Params` is a config as the search sees it: knob name -> value, the dict Optuna asks and is
told (the typed form a trial runs with is spec.Knobs). `utcnow` is the one clock every stored
time and every budget reads: timezone-aware UTC, so a time read back from SQLite or Postgres
compares with it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

Params = dict[str, Any]


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
