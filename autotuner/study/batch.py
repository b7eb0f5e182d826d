"""Which global batch each trial ran, and whether the recommendation compares like with like.

The global batch is the tokens per optimizer step: micro-batch x accumulation x data-parallel
ranks x seq_len. Two configs that run different global batches are two different training runs
(different convergence), not one run made faster. With a global batch held by the study
(`--global-batch`, a space's `global_batch_tokens`) every trial runs the same one; without,
the recommendation says which one the winner ran, and when the trials differ, compares it with
the expert default's (the seed marked so: Purpose.EXPERT_DEFAULT) and names the best config
at that global batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from autotuner.purpose import END_CHECKS, Purpose
from autotuner.status import TrialState
from autotuner.storage.tables import global_batch_tokens
from autotuner.study.columns import column_or_json

if TYPE_CHECKING:
    from autotuner.options import StudyOptions
    from autotuner.storage.models import Trial

__all__ = ["global_batch_entry", "global_batch_tokens", "of_trial"]


def of_trial(t: Trial) -> int | None:
    """The trial's global batch: its column (no JSON read), else from its JSON where a row
    built in memory has only that."""
    return column_or_json(t, "global_batch_tokens", lambda: global_batch_tokens(t.config, t.result))


def global_batch_entry(
    best: Any, groups: Sequence[Any], trials: Sequence[Trial], options: StudyOptions
) -> dict[str, Any]:
    """The recommendation's `global_batch` entry: the winner's tokens per step, whether every
    measured trial ran the same, and otherwise the expert default's and the best at it."""
    tokens = of_trial(best.first)
    measured = [t for t in trials if t.state == TrialState.COMPLETE and t.purpose not in END_CHECKS]
    sizes = sorted({n for t in measured if (n := of_trial(t)) is not None})
    out: dict[str, Any] = {
        "tokens": tokens,
        "same_for_all": len(sizes) <= 1,
        "sizes": sizes[:20],
        "expert_default": None,
        "best_at_expert": None,
    }
    if tokens is None:
        out["text"] = "global batch not known"
        return out
    if len(sizes) <= 1:
        out["text"] = f"{tokens:,} tokens per optimizer step, the same in every measured trial"
        return out
    # The first measured seed: the live recommendation reads only measured trials
    # (study/live.py), and must say what the end-of-study one says.
    ran = sorted(
        (t for t in measured if t.purpose == Purpose.EXPERT_DEFAULT), key=lambda t: t.number
    )
    expert = ran[0] if ran and options.expert_seed else None
    expert_tokens = of_trial(expert) if expert is not None else None
    if expert is None or expert_tokens is None:
        out["text"] = (
            f"{tokens:,} tokens per optimizer step; the trials ran {len(sizes)} different global "
            "batches, so they are different training runs: hold one with --global-batch"
        )
        return out
    out["expert_default"] = {"trial_number": expert.number, "tokens": expert_tokens}
    if expert_tokens == tokens:
        out["text"] = (
            f"{tokens:,} tokens per optimizer step, as the expert default's (trial "
            f"#{expert.number}); other trials ran {len(sizes) - 1} other global "
            + ("batch" if len(sizes) == 2 else "batches")
        )
        return out
    ratio = tokens / expert_tokens
    text = (
        f"the winner runs {tokens:,} tokens per optimizer step, {ratio:.3g}x the expert "
        f"default's {expert_tokens:,} (trial #{expert.number}): a different training run, not "
        "only a faster one"
    )
    same = next((g for g in groups if of_trial(g.first) == expert_tokens), None)
    if same is not None:
        margin = best.median / (same.median or 1.0) - 1.0
        out["best_at_expert"] = {
            "trial_number": same.first.number,
            "objective_value": same.median,
            "params": same.first.params,
            "winner_margin_rel": margin,
        }
        text += (
            f"; at the expert default's global batch the best is trial #{same.first.number} "
            f"(the winner is {margin:+.1%} against it)"
        )
    out["text"] = text + "; hold one global batch with --global-batch to compare like with like"
    return out
