"""`tune`'s progress lines for a study whose trials keep failing for one reason (issue 42: a
factory every config failed on printed its reason 237 times, cut mid-word): the reason is
printed once, its repeats point back to it, and the count comes at the end."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from autotuner.cli import tune
from autotuner.search.rules import LearnedRule
from autotuner.spec import clip
from autotuner.study.events import Event

REASON = (
    "user_model.py:build takes no `attend` argument, so the attention knob cannot choose its "
    "kernel: declare `attend` and call attend(q, k, v) for causal attention"
)


def test_a_repeated_reason_is_printed_once_with_its_count(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.StringIO()
    monkeypatch.setattr(tune, "err", Console(file=buffer, width=80, force_terminal=False))
    progress = tune._TuneProgress(48, quiet=False)
    params = {"micro_batch_size": 8, "precision": "fp32"}
    with progress:
        for n in range(3):
            progress.on_event(Event("finished", n, params, "infeasible", message=REASON))
        for n in range(3, 240):
            progress.on_event(Event("pruned", n, params, "pruned", message=f"learned: {REASON}"))
    progress.print_repeats()
    text = buffer.getvalue()
    assert text.count("declare `attend`") == 2  # the failure once, the pruned proposals' once
    assert "#1 infeasible: as #0 (above)" in text and "#2 infeasible: as #0 (above)" in text
    assert "#239 not run: mb=8 fp32: as #3 (above)" in text  # each proposal still has its line
    assert "the reason of #3 ended 237 trials or proposals in all" in text
    assert "the reason of #0 ended 3 trials or proposals in all" in text


def test_a_shortened_reason_ends_at_a_word() -> None:
    long = "word " * 100
    cut = clip(long.strip(), 53)
    assert cut.endswith("word ...") and len(cut) <= 53
    rule = LearnedRule((("attention", "math"),), 0, REASON * 3)
    described = rule.describe()
    inner = described.split("(", 1)[1]
    assert inner.endswith(" ...)"), described
    assert inner[:-5].split()[-1] in REASON.split(), described  # a whole word before " ..."
