"""How the numerics check reads to a person: the recommendation's `numerics` entry and a parity
run's side of its check on its trial page, from the check's state (search/numerics.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotuner.purpose import Purpose
from autotuner.search.numerics import (
    MAX_CHECKED,
    TOLERANCE_REL,
    Candidate,
    Check,
    candidate_knobs,
    changes_numerics,
    last_row,
    loss_curve,
    numerics_name,
    reference_label,
    verdict,
)
from autotuner.spec import (
    Knobs,
    Precision,
    TrialResult,
    canonical_params,
)
from autotuner.storage.models import Trial

# The purposes of the rows that may hold parity steps: the numerics check's two runs (a
# candidate's run is a parity trial, or the headroom check that ran them first).
PARITY_PURPOSES = (Purpose.PARITY, Purpose.PARITY_REFERENCE, Purpose.HEADROOM)


def page_view(trial: Trial, related: Sequence[Trial]) -> dict[str, Any] | None:
    """A parity run's side of its numerics check, for its trial page: this trial's loss curve,
    its partner's (the reference for a candidate run, the latest candidate run for the
    reference) and the verdict where both finished. None for a trial that ran no parity
    steps. `related`: the study's parity rows and headroom checks (any order)."""
    if not trial.result or trial.purpose not in PARITY_PURPOSES:
        return None
    curve = loss_curve(trial)
    if not curve:
        return None
    key = canonical_params(trial.params)
    rows = sorted(related, key=lambda t: t.number)
    role = "reference" if trial.purpose == Purpose.PARITY_REFERENCE else "candidate"
    ref: Trial | None
    cand: Trial | None
    if role == "reference":
        partner = last_row(rows, key, Purpose.PARITY)
        ref, cand = trial, partner
    else:
        partner = last_row(rows, key, Purpose.PARITY_REFERENCE)
        ref, cand = partner, trial

    def side(t: Trial | None) -> dict[str, Any] | None:
        if t is None:
            return None
        knobs = Knobs.model_validate(t.config.get("knobs", {}))
        # What ran, in words: "bf16 with fp32 AdamW moments" against "bf16 with 8-bit ...".
        name = reference_label(t) if t.purpose == Purpose.PARITY_REFERENCE else numerics_name(knobs)
        return {
            "number": t.number,
            "precision": knobs.precision.value,
            "name": name,
            "curve": loss_curve(t),
        }

    out: dict[str, Any] = {
        "role": role,
        "reference": side(ref),
        "candidate": side(cand),
        "tolerance_rel": TOLERANCE_REL,
        "text": None,
    }
    cand_result = TrialResult.model_validate(cand.result) if cand and cand.result else None
    if ref is not None and cand_result is not None and cand_result.loss_curve and loss_curve(ref):
        out["text"] = verdict(cand_result, ref).text
    elif partner is None:
        what = "candidate's run" if role == "reference" else "reference"
        out["text"] = f"the numerics check's {what} has not run"
    return out


def numerics_entry(
    ranked: Sequence[Candidate],
    chosen: int,
    checks: dict[str, Check],
    *,
    enabled: bool = True,
    tied_over: Candidate | None = None,
) -> dict[str, Any]:
    """The recommendation's `numerics` entry for ranked[chosen]; `enabled`: the study runs the
    check (StudyOptions.numerics_check). `tied_over`: the faster, numerics-changing config it
    is recommended over on a tie (prefer_reference_numerics)."""
    g = ranked[chosen]
    knobs = candidate_knobs(g)
    precision = knobs.precision.value
    name = numerics_name(knobs)  # what the texts call it: "bf16 with 8-bit AdamW moments"
    check = checks.get(g.key)
    skipped = [
        {
            "trial_number": other.first.number,
            "precision": candidate_knobs(other).precision.value,
            "name": numerics_name(candidate_knobs(other)),
            **checks[other.key].entry(),
            "text": checks[other.key].text,
        }
        for other in ranked[:chosen]
        if other.key in checks
    ]
    out: dict[str, Any] = {
        "checked": False,
        "passed": None,
        "precision": precision,
        "name": name,
        "changes_numerics": changes_numerics(knobs),
        "reference_precision": None,
        "tolerance_rel": TOLERANCE_REL,
        "diff_rel": None,
        "steps": None,
        "parity_trials": [],
        "skipped": skipped,
    }
    if not changes_numerics(knobs):
        text = (
            f"{precision}: the reference precision, no check needed"
            if knobs.precision == Precision.BF16
            else f"{precision}: full precision, no check needed"
        )
    elif not enabled:
        text = (
            f"{name} changes numerics and was not checked: this study turned the check off "
            "(options.numerics_check); compare its loss with bf16's before training with it"
        )
        out["ended_unchecked"] = True  # final as it is: no check is to come
    elif check is None:
        text = (
            f"{name} changes numerics and was not checked: the parity check runs at the "
            "end of the study, within its budget of trials and time"
        )
        if skipped:
            text += f" (at most {MAX_CHECKED} candidates are checked)"
    elif check.state == "pending":
        text = f"{name} changes numerics; not checked yet: {check.text}"
        out.update(check.entry())
    else:
        out.update(check.entry())
        out["checked"] = check.state in ("passed", "failed")
        out["passed"] = {"passed": True, "failed": False}.get(check.state)
        text = f"{name}: {check.text}"
    for s in reversed(skipped):
        if s["state"] == "failed":
            how = (
                f" (loss {s['diff_rel']:.1%} from {s['reference_precision']}, tolerance "
                f"{TOLERANCE_REL:.0%})"
                if s["diff_rel"] is not None
                else ""
            )
            text = (
                f"trial #{s['trial_number']} ({s['name']}) was faster but failed the "
                f"numerics check{how}, so it is not recommended; {text}"
            )
    if tied_over is not None:
        other = candidate_knobs(tied_over)
        check = checks.get(tied_over.key)
        state = check.state if check is not None else "not run"
        out["preferred_over"] = {
            "trial_number": tied_over.first.number,
            "precision": other.precision.value,
            "name": numerics_name(other),
            "state": state,
        }
        how = {
            "pending": "changes numerics and its check has not finished",
            "unchecked": "changes numerics and its check could not tell",
        }.get(state, "changes numerics unchecked")
        text = (
            f"trial #{tied_over.first.number} ({numerics_name(other)}) ties it within the "
            f"noise but {how}, so this config, with the reference numerics, is "
            f"recommended; {text}"
        )
    out.pop("state", None)
    out["text"] = text
    return out
