"""How numbers read wherever a person sees them: the dashboard, the CLI, recommendation texts.

One style everywhere: large values with thousands separators and no false precision
(`17,884`, never `1.788e+04` or `17884.03891717149`), small ones to three significant digits,
times in seconds or minutes, timestamps to the second in UTC, and a dash for "not measured"
(never `None`).
"""

from __future__ import annotations

import datetime as dt
import math

MISSING = "–"


def number(value: float | None) -> str:
    """17,884 · 12.3 · 0.0909: thousands separators from 100 up, three significant digits below."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def seconds(value: float | None) -> str:
    """0.091 s · 12.3 s · 2 min 5 s · 1 h 4 min (milliseconds at most below a second)."""
    if value is None:
        return MISSING
    if value < 1:
        return f"{value:.3f} s"
    if value < 60:
        return f"{number(value)} s"
    whole = round(value)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def gib(value: float | None) -> str:
    """0.379 GiB · 12.3 GiB · 141 GiB (three significant digits, enough to compare configs)."""
    return MISSING if value is None else f"{number(value)} GiB"


def loss(value: float | None) -> str:
    """A training loss to four significant digits: 6.025 → 5.914 shows it fell, no more."""
    return MISSING if value is None else f"{value:.4g}"


def timestamp(value: str | dt.datetime | None) -> str:
    """2026-12-01 05:33:47 UTC: to the second; microseconds and '+00:00' help nobody."""
    if value is None:
        return MISSING
    when = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(value)
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S") + " UTC"


def duration_between(start: str | dt.datetime | None, end: str | dt.datetime | None) -> str:
    """The time from start to end (`seconds`), or a dash when either is unknown."""
    if start is None or end is None:
        return MISSING
    first = start if isinstance(start, dt.datetime) else dt.datetime.fromisoformat(start)
    last = end if isinstance(end, dt.datetime) else dt.datetime.fromisoformat(end)
    return seconds((last - first).total_seconds())


def plural(count: int, noun: str) -> str:
    """1 GPU · 2 GPUs (no `GPU(s)`)."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")
