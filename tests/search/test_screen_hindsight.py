"""bench/screen_hindsight.py on the committed H100 Qwen2.5-1.5B landscape recording, made at a
0% headroom: at the tune's 10% the screen keeps from running exactly the three configs that ran
out of memory, and none that measured."""

from __future__ import annotations

import shutil
from pathlib import Path

from autotuner.storage.migrate import upgrade_database
from bench.screen_hindsight import hindsight, main

RECORDING = Path(__file__).resolve().parents[2] / (
    "bench/results/landscape_recording/qwen2.5-1.5b-instruct.db"
)


def test_at_the_tunes_headroom_the_screen_keeps_the_recordings_ooms_from_running(
    tmp_path: Path, capsys
) -> None:
    copy = tmp_path / RECORDING.name
    shutil.copyfile(RECORDING, copy)
    upgrade_database(f"sqlite:///{copy}")
    kept, total_s = hindsight(f"sqlite:///{copy}", 0.1)
    assert [(k.number, k.outcome) for k in kept] == [
        (4, "out of memory"),
        (7, "out of memory"),
        (13, "out of memory"),
    ]
    assert all("predicted to break the 10% memory headroom" in k.why for k in kept)
    assert round(sum(k.wall_s for k in kept)) == 291 and round(total_s) == 480
    # At the headroom it was recorded with, nothing: those configs were launched.
    assert hindsight(f"sqlite:///{copy}", 0.0) == ([], total_s)

    assert main([str(RECORDING)]) == 0  # reads a copy: the committed file is not migrated
    assert "would keep 3 trial(s) from running, 291 of 480 s" in capsys.readouterr().out


def test_with_earlier_sessions_evidence_the_screen_keeps_the_later_sessions_ooms_from_running(
    tmp_path: Path,
) -> None:
    recording = RECORDING.with_name("llama-3.2-1b.db")
    copy = tmp_path / recording.name
    shutil.copyfile(recording, copy)
    upgrade_database(f"sqlite:///{copy}")
    later = ("landscape-llama-3.2-1b-2", "landscape-llama-3.2-1b-3")
    alone, _ = hindsight(f"sqlite:///{copy}", 0.1)
    carried, _ = hindsight(f"sqlite:///{copy}", 0.1, carry=True)
    assert not [k for k in alone if k.study in later]  # they ran at this headroom
    kept = [k for k in carried if k.study in later]
    assert [k.outcome for k in kept] == ["out of memory"] * 10
    assert round(sum(k.wall_s for k in kept)) == 388
