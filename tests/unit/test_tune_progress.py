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


def test_the_bar_counts_each_trial_of_the_budget_once(monkeypatch) -> None:
    """The bar's count is `max_trials`' count: a failed trial that is retried is one trial
    with its retry, and one that is not retried (an end check, a re-measurement, the retry
    itself) still ended; a pruned proposal is no trial of the budget at all. Before, every
    failed trial was taken as retried, so the bar stopped short of the trials run."""
    monkeypatch.setattr(tune, "err", Console(file=io.StringIO(), width=80, force_terminal=False))
    progress = tune._TuneProgress(4, quiet=False)
    params = {"micro_batch_size": 8}
    with progress:
        for event in (
            Event("finished", 0, params, "complete", 20_000.0, purpose="seed"),
            Event("finished", 1, params, "failed", message="crash", purpose="search", retried=True),
            Event("pruned", 2, params, "pruned", message="dominated"),
            Event("finished", 3, params, "failed", message="crash", purpose="search"),  # #1's retry
            Event("finished", 4, params, "failed", message="timeout", purpose="remeasure"),
        ):
            progress.on_event(event)
    assert progress.progress.tasks[0].completed == 3  # #0, #1 with its retry #3, #4


def test_the_bar_ends_at_the_trials_the_study_counts(monkeypatch, sqlite_url: str) -> None:
    """A replayed study whose recording lacks two micro-batches: their trials fail for infra,
    are retried once and fail again. The bar ends at the trials the budget counted."""
    from autotuner.executors.replay import Landscape
    from autotuner.storage.models import TrialState
    from autotuner.storage.session import Database
    from autotuner.storage.trial_repo import TrialRepo
    from tests.fakes import synthetic_landscape
    from tests.unit.conftest import KNOBS, replay_study

    monkeypatch.setattr(tune, "err", Console(file=io.StringIO(), width=80, force_terminal=False))
    full = synthetic_landscape(KNOBS)
    holes = Landscape((p, r) for p, r in full.entries if p["micro_batch_size"] not in (16, 32))
    progress = tune._TuneProgress(10, quiet=False)
    with progress:
        study_id = replay_study(sqlite_url, holes, progress.on_event)
    with Database(sqlite_url).read() as s:
        trials = TrialRepo(s).list(study_id)
    retries = [t for t in trials if t.retry_of is not None]
    assert any(t.state == TrialState.FAILED for t in retries), trials  # the case under test
    counted = [t for t in trials if t.state != TrialState.PRUNED and t.retry_of is None]
    assert progress.progress.tasks[0].completed == len(counted)


def test_a_numerics_check_shows_what_ran_and_its_loss(monkeypatch) -> None:
    """A parity trial's row names the candidate it checks, but the reference ran the
    reference precision, and a parity trial's tokens/s counts its compile: the line says what
    ran and the loss it measured. On the H200 it read `numerics reference: 6,140 tok/s ...
    fp8-tensorwise` for a bf16 run (bench/results/h200_session_20261202)."""
    out = io.StringIO()
    monkeypatch.setattr(tune, "err", Console(file=out, width=80, force_terminal=False))
    progress = tune._TuneProgress(3, quiet=False)
    fp8 = {"micro_batch_size": 4, "precision": "fp8-tensorwise"}
    curve = [11.76, 9.1, 6.02, 5.213]
    with progress:
        progress.on_event(Event("finished", 0, fp8, "complete", 29_958.0, purpose="seed"))
        progress.on_event(
            Event(
                "finished", 1, fp8, "complete", 6_140.0, purpose="parity-ref",
                ran={"precision": "bf16"}, loss_curve=curve,
            )
        )  # fmt: skip
        progress.on_event(
            Event(
                "finished", 2, fp8, "infeasible", 2_616.0, "numerics check: 9.1% apart",
                purpose="parity", loss_curve=[11.76, 10.0, 8.0, 7.5],
            )
        )  # fmt: skip
    assert progress.best == 29_958.0
    text = out.getvalue()
    assert "#1 numerics reference: 4 steps, loss 11.8 -> 5.21  mb=4 bf16" in text
    assert "6,140" not in text and "2,616" not in text
    assert "#2 numerics check: 4 steps, loss 11.8 -> 7.5  mb=4 fp8-tensorwise" in text
    assert "numerics check: 9.1% apart" in text


def test_a_headroom_check_with_the_candidates_parity_steps_says_both(monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(tune, "err", Console(file=out, width=100, force_terminal=False))
    progress = tune._TuneProgress(2, quiet=False)
    fp8 = {"micro_batch_size": 4, "precision": "fp8-tensorwise"}
    with progress:
        progress.on_event(Event("finished", 0, fp8, "complete", 29_958.0, purpose="seed"))
        progress.on_event(
            Event(
                "finished", 1, fp8, "complete", 29_925.0, purpose="headroom",
                loss_curve=[11.76, 9.0, 5.213],
            )
        )  # fmt: skip
    assert progress.best == 29_958.0  # a check is never the bar's best
    assert (
        "#1 headroom and numerics check: 29,925 tok/s, 3 parity steps, loss 11.8 -> 5.21  "
        "mb=4 fp8-tensorwise" in out.getvalue()
    )
