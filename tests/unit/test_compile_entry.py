"""The recommendation's compile entry (study/compile_time.py): a regional compile says what the
trainer must compile on its own to get the speed measured; a whole-model compile does not."""

from __future__ import annotations

from types import SimpleNamespace

from autotuner.study.compile_time import compile_entry
from tests.fakes import measured

BLOCK = "16 LlamaDecoderLayer blocks and the output layer with its loss"


def _best(*regions: str | None) -> SimpleNamespace:
    # The first compiled cold (every graph missed the study's cache), the rest warm.
    results = [
        measured(
            50_000.0,
            compile_s=12.0,
            compile_cache_hits=hits,
            compile_cache_misses=4 - hits,
            compiled_regions=r,
        )
        for r, hits in zip(regions, (0, 4, 4), strict=False)
    ]
    trials = [SimpleNamespace(number=i) for i in range(len(results))]
    return SimpleNamespace(trials=trials, results=results)


def test_a_regional_compile_says_which_regions_the_trainer_must_compile() -> None:
    entry = compile_entry(_best(BLOCK, BLOCK))
    assert entry is not None and entry["text"].startswith("12.0 s cold (trial #0)")
    assert entry["regions"] == (
        "16 LlamaDecoderLayer blocks and the output layer with its loss, each compiled on its "
        "own: your trainer must compile the same regions for this speed (autotuner export "
        "shows how)"
    )


def test_a_whole_model_compile_names_no_regions() -> None:
    entry = compile_entry(_best(None))
    assert entry is not None and "regions" not in entry
