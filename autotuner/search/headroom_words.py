"""The headroom check's words that readers print: a module of its own, importing nothing, so
`autotuner best --server` draws the recommendation without loading the check's code (it reads
trial rows: SQLAlchemy, half a second of a cold process)."""

from __future__ import annotations

from typing import Any

NOT_CHECKED_YET = "not checked yet with an evaluation pass and a checkpoint save"
NOT_CHECKED_OFF = (
    "not checked with an evaluation pass and a checkpoint save: the study turned the check off "
    "(headroom_check=false)"
)
NOT_CHECKED_ENDED = (
    "not checked with an evaluation pass and a checkpoint save: the study ended before its "
    "check ran"
)


def passed_over_text(passed_over: list[dict[str, Any]]) -> list[str]:
    """`trial #7 was faster but leaves 7.7% free, ...`, one clause per reason: trials passed
    over for the same reason are named together (a GPT-2 study on the H200 passed over three
    micro-batch-128 trials, each leaving 7.7% free, and said so three times)."""
    by_why: dict[str, list[int]] = {}
    for p in passed_over:
        by_why.setdefault(p["why"], []).append(p["trial_number"])
    clauses = []
    for why, numbers in by_why.items():
        if len(numbers) == 1:
            clauses.append(f"trial #{numbers[0]} was faster but {why}")
        else:
            names = ", ".join(f"#{n}" for n in numbers[:-1]) + f" and #{numbers[-1]}"
            clauses.append(f"trials {names} were faster but each {why}")
    return clauses
