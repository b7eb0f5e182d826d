"""What a recommendation's end checks say once its study has ended: a numerics or headroom
check still to come never runs, and its entry says so. A module of its own, importing only
words: a read of an ended study's best (`autotuner best`) rewrites the stored entries without
loading the checks' code (the spec and the trial rows: a fifth of a cold read)."""

from __future__ import annotations

from typing import Any

from autotuner.search.headroom_words import NOT_CHECKED_ENDED, NOT_CHECKED_YET

# The precisions whose numerics differ from the reference (bf16, else fp32), by value:
# numerics.CHANGES_NUMERICS is built from these (a value that is no Precision fails there).
# fp32 is never one: it is at least as precise as either reference.
CHANGING_VALUES = frozenset({"fp16", "tf32", "fp8-tensorwise", "fp8-rowwise"})


def numerics_as_ended(entry: dict[str, Any]) -> dict[str, Any]:
    """The `numerics` entry once the study has ended: a numerics-changing winner whose parity
    check never started did not get one, though its live text says the check is still to come
    (a 10-minute Llama 3B study on the H200 ended so: its budget was spent before the check)."""
    never_started = entry.get("checked") is False and not entry.get("parity_trials")
    # Entries stored before `changes_numerics` was written: by their precision.
    changing = entry.get("changes_numerics", entry.get("precision") in CHANGING_VALUES)
    if not (never_started and changing) or entry.get("ended_unchecked"):
        return entry
    name = entry.get("name") or entry["precision"]
    text = (
        f"{name} changes numerics and was not checked: the study ended before its "
        "parity check against the reference precision ran; compare its loss with bf16's (or "
        "fp32's) before training with it"
    )
    return {**entry, "text": text, "ended_unchecked": True}


def headroom_as_ended(entry: dict[str, Any]) -> dict[str, Any]:
    """The `headroom` entry once the study has ended: a check still to come never runs (its
    budget was spent, or the check would have ended past the time budget: `stopped` says)."""
    text = entry.get("text", "")
    if entry.get("check") is not None or not (NOT_CHECKED_YET in text or NOT_CHECKED_ENDED in text):
        return entry
    text = text.replace(NOT_CHECKED_YET, NOT_CHECKED_ENDED)  # stored so before the flag too
    return {**entry, "text": text, "ended_unchecked": True}  # as numerics_as_ended marks it
