"""The attention probe runs once per kernel and dtype in a study: a trial's config turns it off
(MeasureSettings.attention_probe) where an earlier trial of the study already ran the same
attention kernel at the same dtype, the model's head shape being the study's (on the H200 the
probe cost an eager GPT-2 trial 0.18 s: bench/results/h200_session_20261204d)."""

from __future__ import annotations

from autotuner.spec import Attention, Knobs, TrialStatus
from autotuner.storage.models import TrialState
from autotuner.storage.session import Database
from tests.search.conftest import Run, gpt2_space, make_policy


def test_a_kernel_is_probed_until_a_trial_has_run_it(db: Database, run_study: Run) -> None:
    _, _, trials, _ = run_study(db, trials=24)
    ran: set[tuple[str, str]] = set()
    probed = skipped = 0
    for t in sorted(trials, key=lambda t: t.number):
        if t.state == TrialState.PRUNED or not t.config:
            continue
        knobs = Knobs.model_validate(t.config["knobs"])
        p = knobs.precision
        dtype = "bf16" if p.is_fp8 else p.value if p.is_half else "fp32"  # tf32 attends in fp32
        kernel = (knobs.attention.value, dtype)
        expected = kernel not in ran
        assert t.config["measure"]["attention_probe"] == expected, (t.number, kernel, ran)
        probed, skipped = probed + expected, skipped + (not expected)
        if t.result and t.result.get("status") == TrialStatus.OK.value:
            ran.add(kernel)
    assert probed >= 2 and skipped >= 5, (probed, skipped)  # both ways, many times
    # A coordinator that takes the study over knows what ran from the stored rows.
    fresh = make_policy(gpt2_space())
    one = Knobs.model_validate({**Knobs().model_dump(), "attention": "flash", "precision": "bf16"})
    assert ("flash", "bf16") in ran and fresh.attention_probe(one)
    for t in trials:
        fresh.observe_row(t, fit=False)
    assert not fresh.attention_probe(one)
    assert fresh.attention_probe(one.model_copy(update={"attention": Attention.CUDNN}))
