"""`tune`'s progress lines: proxies and end checks are labelled and never the bar's best."""

from __future__ import annotations

import io

from rich.console import Console

from autotuner.cli import tune
from autotuner.study.events import Event


def test_a_proxy_is_labelled_and_never_the_best(monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(tune, "err", Console(file=out, width=80, force_terminal=False))
    progress = tune._TuneProgress(4, quiet=False)
    with progress:
        params = {"micro_batch_size": 8, "precision": "bf16"}
        progress.on_event(Event("finished", 0, params, "complete", 49_701.0, purpose="seed"))
        progress.on_event(Event("finished", 1, params, "complete", 153_902.0, purpose="proxy"))
        progress.on_event(Event("finished", 2, params, "complete", 51_298.0, purpose="headroom"))
    assert progress.best == 49_701.0
    text = out.getvalue()
    assert "#1 proxy (shallow model): 153,902 tok/s" in text
    assert "#2 headroom check: 51,298 tok/s" in text
