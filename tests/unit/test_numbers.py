"""Numbers read the same everywhere a person sees them (autotuner.numbers), and the texts built
from them (the knob-importance verdicts) use that style, never `1.658e+06`."""

from __future__ import annotations

import datetime as dt

from autotuner import numbers
from autotuner.search.importance import knob_report


def test_numbers_read_like_people_write_them() -> None:
    assert numbers.number(17884.03891717149) == "17,884"
    assert numbers.number(1_658_000.4) == "1,658,000"
    assert numbers.number(12.345) == "12.3"
    assert numbers.number(0.0909450839) == "0.0909"
    assert numbers.number(None) == numbers.MISSING
    assert numbers.seconds(None) == numbers.MISSING  # never "None s"
    assert numbers.seconds(0.0909450839) == "0.091 s"
    assert numbers.seconds(12.34) == "12.3 s"
    assert numbers.seconds(125.2) == "2 min 5 s"
    assert numbers.seconds(3 * 3600 + 240) == "3 h 4 min"
    assert numbers.gib(0.3789215087890625) == "0.379 GiB"
    assert numbers.loss(6.02458381652832) == "6.025"
    assert numbers.loss(None) == numbers.MISSING  # never "None -> None"
    assert numbers.plural(1, "GPU") == "1 GPU" and numbers.plural(2, "GPU") == "2 GPUs"


def test_timestamps_to_the_second_in_utc() -> None:
    assert numbers.timestamp("2026-12-01T05:33:47.750719+00:00") == "2026-12-01 05:33:47 UTC"
    # Another offset is shown in UTC too, so two timestamps on a page compare at a glance.
    assert numbers.timestamp("2026-12-01T07:33:47.1+02:00") == "2026-12-01 05:33:47 UTC"
    naive = dt.datetime(2026, 12, 1, 5, 33, 47, 123456)  # SQLite's, stored as UTC
    assert numbers.timestamp(naive) == "2026-12-01 05:33:47 UTC"
    assert numbers.duration_between(
        "2026-12-01T05:33:47.750719+00:00", "2026-12-01T05:34:01.939768+00:00"
    ) == ("14.2 s")
    assert numbers.duration_between(None, "2026-12-01T05:34:01+00:00") == numbers.MISSING


def test_importance_texts_use_the_same_number_style() -> None:
    configs = [
        (
            {"micro_batch_size": mb, "precision": p},
            1_000_000.0 + 90_000 * i + (300_000 if p == "bf16" else 0),
        )
        for i, mb in enumerate([8, 16, 32, 64])
        for p in ("fp32", "bf16")
    ]
    rows = knob_report(configs, noise_rel=0.02)
    texts = [r["text"] for r in rows if r["verdict"] == "matters"]
    assert texts, rows
    best = max(v for _, v in configs)
    for text in texts:
        assert "e+" not in text, text
        assert f"best overall {best:,.0f}" in text, text
