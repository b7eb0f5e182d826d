"""The headroom check of the recommendation: its config once more, evaluating and checkpointing.

A timed trial shows what the training steps need; a real run also evaluates and saves
checkpoints. Before a config is recommended it runs once more, as a `headroom` trial
(`MeasureSettings.headroom_check`): after the timed repeats, one evaluation forward pass and a
save of the model and optimizer state dicts, in the same process, and the peak over all of it
(`TrialResult.peak_*_with_eval_ckpt_gib`). If that peak leaves less than the headroom free
(headroom.py), or the trial runs out of memory, the config is not recommended: the next
eligible one is, and the recommendation says why. The next one is checked in turn, at most
MAX_CHECKED per study, within the trial budget (one trial is reserved: search/remeasure.py).

The coordinator runs it after the re-measurements (endgame.py). For a config that changes
numerics it runs after the numerics check's reference and trains the candidate's parity steps
first (numerics.headroom_plan): its row then also holds the candidate's loss curve.
Like the parity trials (numerics.py), a headroom trial's row carries the params of the config
it checks, is never told to the sampler and is never a candidate (END_CHECKS); the trial rows
are the state, so a restarted coordinator carries on, and a check lost or failed for infra
reasons runs once more as a new row.

Off a GPU (memory_kind `cpu_rss`) the check still runs and its peak is reported, but the
headroom is not enforced (headroom.py says why).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from autotuner.options import StudyOptions
from autotuner.purpose import Purpose
from autotuner.search import numerics
from autotuner.search.ended_checks import headroom_as_ended as as_ended  # noqa: F401  (its callers' name)
from autotuner.search.headroom import KIND_WORDS, enforced, free_rel, margin, need_gib, violation
from autotuner.search.headroom_words import (
    NOT_CHECKED_ENDED as NOT_CHECKED_ENDED,
)
from autotuner.search.headroom_words import NOT_CHECKED_OFF
from autotuner.search.headroom_words import NOT_CHECKED_YET as NOT_CHECKED_YET
from autotuner.search.headroom_words import passed_over_text as passed_over_text
from autotuner.search.numerics import Candidate, last_row
from autotuner.spec import FailureClass, TrialResult
from autotuner.storage.models import Trial, TrialState

MAX_CHECKED = 2  # the winner, then the next eligible config

State = Literal["pending", "passed", "failed", "unchecked", "reported"]


@dataclass
class Check:
    """One config's headroom check, as its trial row tells it."""

    state: State
    text: str
    trial: int | None = None
    result: TrialResult | None = None

    def entry(self) -> dict[str, Any]:
        need = need_gib(self.result) if self.result else None
        limit = self.result.memory_limit_gib if self.result else None
        return {
            "state": self.state,
            "trial_number": self.trial,
            "peak_gib": need,
            "free_rel": free_rel(need, limit),
            "text": self.text,
        }


def check_of(key: str, trials: Sequence[Trial], options: StudyOptions) -> Check | None:
    """The headroom check of the config `key`; None when it never started (or runs again)."""
    row = last_row(trials, key, Purpose.HEADROOM)
    if row is None:
        return None
    n = row.number
    state = TrialState(row.state)
    if state == TrialState.RUNNING:
        return Check("pending", f"the headroom check (trial #{n}) is running", n)
    result = TrialResult.model_validate(row.result) if row.result else None
    what = "with an evaluation pass and a checkpoint save"
    if state == TrialState.COMPLETE and result is not None:
        need = need_gib(result)
        if result.peak_mem_with_eval_ckpt_gib is None or need is None:
            return Check(
                "unchecked",
                f"not checked: trial #{n} reported no peak {what} (its executor did not run "
                "the check)",
                n,
                result,
            )
        if not enforced(result, options):
            kind = KIND_WORDS.get(result.memory_kind, "no limit known")
            return Check(
                "reported",
                f"{what} (trial #{n}) the peak was {need:.2f} GiB ({kind}): reported, the "
                f"{options.headroom:.0%} headroom applies to GPU memory only",
                n,
                result,
            )
        limit = result.memory_limit_gib or 0.0
        free = 1.0 - need / limit
        base = f"{what} (trial #{n}) the peak was {need:.1f} GiB of {limit:.1f} GiB"
        base += f", {free:.1%} free"
        if violation(result, options) > 0:
            return Check(
                "failed",
                f"{base}: less than the {options.headroom:.0%} headroom",
                n,
                result,
            )
        return Check("passed", f"{base}: the {options.headroom:.0%} headroom holds", n, result)
    if row.error_class == FailureClass.OOM.value:
        return Check("failed", f"trial #{n} ran out of memory {what}", n, result)
    why = f"{row.error_class}: {row.error_message or ''}".strip(": ")
    return Check("unchecked", f"not checked: its trial #{n} failed ({why[:200]})", n, result)


def checks_of(
    ranked: Sequence[Candidate], trials: Sequence[Trial], options: StudyOptions
) -> dict[str, Check]:
    # Only headroom rows make a check: filter once, not once per candidate (every candidate
    # of a 10,000-trial study scanned every trial, a minute and a half, before this).
    trials = [t for t in trials if t.purpose == Purpose.HEADROOM]
    out = {}
    for g in ranked:
        check = check_of(g.key, trials, options)
        if check is not None:
            out[g.key] = check
    return out


C = TypeVar("C", bound=Candidate)


def surviving(ranked: Sequence[C], checks: dict[str, Check]) -> list[C]:
    """The candidates whose headroom check did not fail (in rank order)."""
    return [g for g in ranked if (c := checks.get(g.key)) is None or c.state != "failed"]


def next_check(ranked: Sequence[C], trials: Sequence[Trial], options: StudyOptions) -> C | None:
    """The config to check next: the one the recommendation would pick (numerics included),
    when it has no check yet and fewer than MAX_CHECKED were started; else None."""
    if options.headroom <= 0 or not options.headroom_check:
        return None
    checks = checks_of(ranked, trials, options)
    alive = surviving(ranked, checks)
    i = numerics.choose(alive, numerics.checks_of(alive, trials))
    if i is None or alive[i].key in checks or len(checks) >= MAX_CHECKED:
        return None
    return alive[i]


def headroom_entry(
    best: Any, checks: dict[str, Check], passed_over: list[dict[str, Any]], options: StudyOptions
) -> dict[str, Any]:
    """The recommendation's `headroom` entry: peak, limit and headroom side by side (the
    largest peak of the winner's measurements and its check), the check, and the faster
    configs passed over for memory."""
    check = checks.get(best.key)
    results = list(best.results) + ([check.result] if check and check.result else [])
    out = margin(results, options)
    out["check"] = check.entry() if check else None
    out["passed_over"] = passed_over
    text = out["text"]
    if check is not None:
        text += f"; checked: {check.text}"
    elif options.headroom > 0:
        text += f"; {NOT_CHECKED_YET if options.headroom_check else NOT_CHECKED_OFF}"
    out["text"] = "; ".join([*passed_over_text(passed_over), text])
    return out
