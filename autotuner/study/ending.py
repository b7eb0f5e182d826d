"""When a study ends for a reason of its own, and the one line that says it.

Two cases, both ending the study `failed` with that line as its `error_message` (the CLI's
`tune`, `status` and `best`, the API's study body and the dashboard's study page show it):

- at once, on a trial's result that no other config of the study would escape (`stop_reason`):
  an `environment` failure (the worker cannot import a package the model needs, has no GPU
  where the study asked for one, a driver that does not match), or an `unsupported` result
  that blames no knob the space searches (a model that cannot be built at all, or a value the
  space fixes). Learning it config by config would only record the same failure for every one
  (a 3-minute `hf` study on a worker without transformers recorded 1,951 trials).
- at the end, when no trial measured anything (`nothing_measured`): every config pruned, out of
  memory or failing. Its most frequent reason names the study's, with its count.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from autotuner.search.space import IntRange, SearchSpace
from autotuner.spec import FailureClass, TrialResult, TrialStatus
from autotuner.storage.outcome_reads import OutcomeReads


def searched(space: SearchSpace) -> set[str]:
    """The knobs whose value differs between the space's configs (a one-value domain is as
    fixed as the `fixed:` section)."""
    out = set()
    for name, domain in space.knobs.items():
        many = domain.low < domain.high if isinstance(domain, IntRange) else len(domain) > 1
        if many:
            out.add(name)
    return out


def first_line(text: str | None) -> str:
    """A message's first line (a worker's crash text carries a traceback below it)."""
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def stop_reason(number: int, result: TrialResult, space: SearchSpace) -> str | None:
    """The study-level reason to stop now, given trial `number`'s result; None to go on."""
    if result.status == TrialStatus.OK:
        return None
    message = first_line(result.error_message)
    if result.failure_class == FailureClass.ENVIRONMENT:
        return f"the worker's environment cannot run this study (trial #{number}): {message}"
    if result.failure_class != FailureClass.UNSUPPORTED or result.unsupported_knobs is None:
        return None  # None: the worker did not say; the search learns its fallback rule
    blamed = set(result.unsupported_knobs)
    if blamed & searched(space):
        return None  # other values of a searched knob may run
    if not blamed:
        return f"no config of this model can run (trial #{number}): {message}"
    fixed = ", ".join(f"{k}={v}" for k, v in sorted(result.unsupported_knobs.items()))
    return (
        f"no config of this space can run: the space fixes {fixed}, which this worker cannot "
        f"run (trial #{number}): {message}; search or set another value"
    )


def nothing_measured(s: Session, study_id: str) -> str | None:
    """For a study whose search is over: the reason it measured nothing, or None where a trial
    measured a throughput. The reason is the most frequent failure class among the trials that
    ran (else among those pruned), counted, in the words of its first trial: messages differ
    in their numbers from config to config (a predicted OOM's GiB), their class does not."""
    reads = OutcomeReads(s)
    if reads.measured_count(study_id):
        return None
    groups = reads.failure_groups(study_id)
    if not groups:
        return "nothing was measured: no trial ran (the space has no config to run)"
    not_run = sum(count for was_pruned, _, count, _ in groups if was_pruned)
    ran = sum(count for was_pruned, _, count, _ in groups if not was_pruned)
    was_pruned, error_class, count, first = groups[0]
    message = reads.error_message(study_id, first)
    if ran:
        what = f"{ran} trial{'s' if ran != 1 else ''} failed"
        if not_run:
            what += f" and {not_run} {'were' if not_run != 1 else 'was'} ruled out before launch"
    else:
        what = f"every config was ruled out before launch ({not_run} proposals, none ran)"
    kind = (error_class or "no class") + (" (not run)" if was_pruned else "")
    return (
        f"nothing was measured: {what}; the most frequent reason, {kind} in {count} "
        f"(first #{first}): {first_line(message) or 'no message'}"
    )
