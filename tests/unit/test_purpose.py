"""Trial purposes: the enum's values are the strings stored in `trials.purpose`, so rows written
before it existed read back as its members, and no migration was needed."""

from __future__ import annotations

from autotuner.purpose import END_CHECKS, SEARCH_TRIALS, Purpose


def test_the_stored_values_stay_the_same_strings() -> None:
    assert {p.value for p in Purpose} == {
        "search",
        "seed",
        "expert-default",
        "remeasure",
        "reference",
        "parity",
        "parity-ref",
        "headroom",
        "proxy",
    }


def test_a_plain_string_read_back_matches_its_member() -> None:
    assert "expert-default" in SEARCH_TRIALS and "parity-ref" in END_CHECKS
    assert {"remeasure": 1}[Purpose.REMEASURE] == 1
    assert not (SEARCH_TRIALS & END_CHECKS) and Purpose.REMEASURE not in SEARCH_TRIALS | END_CHECKS
