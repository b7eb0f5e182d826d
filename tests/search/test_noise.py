"""Winners under noise: interleaved re-measurement, margins and ties, knob importance against
the noise floor, and the early stop."""

from __future__ import annotations

import itertools
import zlib

from autotuner.executors.replay import Landscape
from autotuner.purpose import SEARCH_TRIALS
from autotuner.search.space import parse_space
from autotuner.storage.models import TrialState
from tests.fakes import FAKE_H200, measured

KNOBS = {
    "micro_batch_size": [8, 16, 32, 64],
    "optimizer": ["adamw-fused", "adamw-foreach"],
    "vocab_pad_multiple": [1, 64],
}
SPACE = parse_space({"name": "noise-test", "knobs": KNOBS})


def _landscape(optimizer_effect: float = 0.0) -> Landscape:
    """Throughput grows with micro-batch, padding wins 4%, the optimizer wins
    `optimizer_effect`; every repeat has a 1% spread."""
    entries = []
    for mb, opt, pad in itertools.product(*KNOBS.values()):
        p = {"micro_batch_size": mb, "optimizer": opt, "vocab_pad_multiple": pad}
        tps = 50_000.0 * mb / (mb + 8) * (1.04 if pad == 64 else 1.0)
        tps *= 1.0 + (optimizer_effect if opt == "adamw-fused" else 0.0)
        tps *= 1.0 + 0.001 * (zlib.crc32(str(p).encode()) % 3 - 1)
        entries.append(
            (
                p,
                measured(
                    tps,
                    peak_mem_gib=mb * 0.5,
                    fingerprint=FAKE_H200,
                    wall_s=20.0,
                ),
            )
        )
    return Landscape(entries)


def test_top_candidates_are_remeasured_interleaved_and_a_tie_is_called_a_tie(db, run_study) -> None:
    _, _, trials, rec = run_study(
        db,
        space=SPACE,
        landscape=_landscape(),
        trials=20,
        noise_rel=0.01,
        options={"early_stop_patience": 0},
    )
    remeasured = [t for t in trials if t.purpose == "remeasure"]
    assert len(remeasured) == 2 * 2  # top 2, A B A B
    searched = [x.number for x in trials if x.purpose in SEARCH_TRIALS]
    assert all(t.number > max(searched) for t in remeasured)
    a, b = remeasured[0].params, remeasured[1].params
    assert a != b and [t.params for t in remeasured] == [a, b, a, b]
    assert rec is not None
    # The winner is chosen on pooled measurements, among the re-measured candidates.
    assert rec["measurements"] == 3 and rec["params"] in (a, b)
    up = rec["runner_up"]
    assert up["interleaved"]["pairs"] == 2
    # The best two differ only in the optimizer, which does nothing here: a tie, said plainly.
    assert up["tie"] is True and "tie" in up["text"]
    assert up["margin_rel"] <= up["noise_rel"]


def test_a_real_margin_is_reported_as_a_win(db, run_study) -> None:
    _, _, _, rec = run_study(
        db,
        space=SPACE,
        landscape=_landscape(optimizer_effect=0.05),
        trials=16,
        noise_rel=0.01,
        options={"early_stop_patience": 0},
    )
    assert rec is not None
    assert rec["params"]["optimizer"] == "adamw-fused"
    up = rec["runner_up"]
    assert up["tie"] is False and up["margin_rel"] > up["noise_rel"]


def test_importance_says_which_knobs_do_not_matter_within_noise(db, run_study) -> None:
    _, _, _, rec = run_study(
        db,
        space=SPACE,
        landscape=_landscape(),
        trials=16,
        noise_rel=0.01,
        options={"early_stop_patience": 0},
    )
    assert rec is not None
    rows = {r["knob"]: r for r in rec["importance"]}
    assert set(rows) == set(KNOBS)
    assert rows["optimizer"]["verdict"] == "within noise"
    assert "does not matter (within noise)" in rows["optimizer"]["text"]
    assert rows["micro_batch_size"]["verdict"] == "matters"
    assert rows["vocab_pad_multiple"]["verdict"] == "matters"
    assert rows["micro_batch_size"]["importance"] is not None
    assert rec["importance"][0]["verdict"] == "matters"  # ordered: what matters first


def test_early_stop_when_nothing_improves_beyond_noise(db, run_study) -> None:
    _, executor, trials, rec = run_study(
        db, space=SPACE, landscape=_landscape(), trials=60, options={"early_stop_patience": 5}
    )
    launched = [t for t in trials if t.state != TrialState.PRUNED]
    assert len(executor.submitted) == len(launched) < 60
    assert rec is not None and rec["stopped"].startswith("converged")
    assert sum(t.purpose == "remeasure" for t in trials) == 4  # still re-measured before done
