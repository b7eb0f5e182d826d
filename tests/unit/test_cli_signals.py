"""Ctrl-C during `tune` (autotuner/cli/signals.py): Python drops an exception raised inside a
garbage collector's weakref callback, which is where a signal handler's KeyboardInterrupt lands
when the signal comes during one (a Ctrl-C one second into `tune` was lost so, and the study ran
to its end). The signal is recorded too, and the run stops on it before its first trial."""

from __future__ import annotations

import signal
import sys
import weakref

import pytest
import typer
from typer.testing import CliRunner

from autotuner.cli import signals
from autotuner.cli.tune import run_here
from autotuner.executors.replay import ReplayExecutor
from autotuner.search.space import parse_space
from autotuner.spec import ModelSpec
from autotuner.storage.session import Database
from autotuner.storage.study_repo import StudyRepo
from autotuner.storage.trial_repo import TrialRepo
from autotuner.study.coordinator import create_study
from tests.fakes import synthetic_landscape


class _Collected:
    """An object whose collection calls back into Python, as SQLAlchemy's event registry's does."""


def _dropped_in_a_weakref_callback(handler, monkeypatch: pytest.MonkeyPatch) -> None:
    """Call the handler where Python drops what it raises (printed as "Exception ignored")."""
    dropped: list[type[BaseException] | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: dropped.append(u.exc_type))
    obj = _Collected()
    ref = weakref.ref(obj, lambda _: handler(None))
    del obj
    assert ref() is None and dropped == [KeyboardInterrupt]
    monkeypatch.undo()


def test_a_ctrl_c_python_drops_is_still_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    previous = signal.getsignal(signal.SIGINT)  # a test worker's own may not be Python's
    signals.catch_ctrl_c()
    try:
        handler = signal.getsignal(signal.SIGINT)
        _dropped_in_a_weakref_callback(lambda frame: handler(signal.SIGINT, frame), monkeypatch)
        assert signals.STOP.pending and signals.STOP.name == "SIGINT"
        with pytest.raises(KeyboardInterrupt):
            signals.STOP.check()
    finally:
        signal.signal(signal.SIGINT, previous)
        signals.STOP.pending = False


def test_interruptible_records_sigterm_restores_the_handlers_and_forgets_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with signals.interruptible() as stop:
        handler = signal.getsignal(signal.SIGTERM)
        _dropped_in_a_weakref_callback(lambda frame: handler(signal.SIGTERM, frame), monkeypatch)
        assert stop.pending and (stop.name, stop.number) == ("SIGTERM", int(signal.SIGTERM))
        # Once one came, both are ignored until the block ends: the interrupt is stored whole.
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) == before and not signals.STOP.pending


def test_a_ctrl_c_dropped_before_the_run_interrupts_the_study_before_its_first_trial(
    sqlite_url: str,
) -> None:
    knobs = {"micro_batch_size": [8, 16], "precision": ["fp32", "bf16"]}
    db = Database(sqlite_url)
    study_id = create_study(
        db,
        model=ModelSpec.resolve({"preset": "tiny"}),
        space=parse_space({"name": "s", "knobs": knobs}),
        max_trials=3,
    )
    executor = ReplayExecutor(synthetic_landscape(knobs), list(knobs))
    signals.STOP.record(int(signal.SIGINT))  # as the handler did during the setup's imports
    owner = "test-owner"
    with db.session() as s:
        StudyRepo(s).try_acquire(study_id, owner, 300.0)

    def run() -> None:
        run_here(db, study_id, executor, owner, 3, False)

    app = typer.Typer()
    app.command()(run)
    result = CliRunner().invoke(app, [])
    assert result.exit_code == 130, result.output
    assert f"study {study_id} interrupted by SIGINT" in result.output
    with db.read() as s:
        assert StudyRepo(s).require(study_id).status == "interrupted"
        assert not TrialRepo(s).list(study_id)  # stopped before its first trial
    assert not signals.STOP.pending  # forgotten once the interrupt was stored
