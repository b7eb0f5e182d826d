"""The user's own tokens through the real DataLoader, and the data-starvation diagnosis, on the
CPU with real trials: a nanoGPT-style .bin file, a `datasets` directory whose short rows are
padded, and a slow input pipeline (fault slow_input) that the recommendation must name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from autotuner.purpose import Purpose
from autotuner.search.objective import Objective
from autotuner.spec import TrialConfig, TrialResult, TrialStatus
from autotuner.storage.models import Trial, TrialState
from autotuner.study.input_pipeline import INPUT_WAIT_THRESHOLD
from autotuner.study.recommend import recommend
from workers.data import LoaderBatches
from workers.trial import build_step, run_trial

from .conftest import fast, make_config

CPU = torch.device("cpu")
VOCAB = 512  # the tiny preset's


def counting_file(path: Path, tokens: int = 20_000, dtype=np.uint16) -> Path:
    """Token i is i mod 500: every window counts up by one (learnable, and recognisable)."""
    (np.arange(tokens) % 500).astype(dtype).tofile(path)
    return path


def tokens_counted_per_step(result: TrialResult) -> float:
    """The tokens per step behind the reported tokens/s: each repeat's rate is counted tokens x
    S / its time, and step_time_s is the median repeat time / S; with FAST's two repeats the
    median is the mean, so counted = step_time_s x 2 / (1/rate_1 + 1/rate_2)."""
    rates = result.repeat_tokens_per_s
    assert len(rates) == 2
    return result.step_time_s * len(rates) / sum(1 / r for r in rates)


def test_a_trial_on_a_uint16_token_file_reads_it_and_reports_the_input_wait(
    tmp_path: Path,
) -> None:
    path = counting_file(tmp_path / "train.bin")
    measure = fast(data={"path": str(path)})
    info: dict = {"notes": []}
    build_step(make_config(measure=measure, loader_workers=0, micro_batch_size=2), CPU, info)
    batches = info["_batches"]
    try:
        assert isinstance(batches, LoaderBatches)
        x, y = batches.next()
        assert x.shape == (2, 64) and torch.equal(x[:, 1:], y[:, :-1])
        assert bool((((y - x) % 500) == 1).all())  # the file's windows, not generated tokens
    finally:
        batches.close()

    result = run_trial(make_config(measure=measure, loader_workers=0, micro_batch_size=2))
    assert result.status == TrialStatus.OK, result.error_message
    assert result.input_wait_share is not None and 0 < result.input_wait_share < 1
    assert result.gpu_idle_share is None  # no NVML on the CPU
    assert result.padding_share is None  # windows of a flat file are never padded
    assert tokens_counted_per_step(result) == pytest.approx(result.tokens_per_step)
    assert any(str(path) in note for note in result.notes)


def test_a_uint32_file_is_read_as_uint32(tmp_path: Path) -> None:
    path = counting_file(tmp_path / "train.uint32.bin", dtype=np.uint32)
    result = run_trial(make_config(measure=fast(data={"path": str(path)}), loader_workers=0))
    assert result.status == TrialStatus.OK, result.error_message


def test_short_dataset_rows_are_padded_and_counted_apart(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = [[(start + i) % 500 for i in range(20)] for start in range(200)]  # 20 < seq_len+1
    datasets.Dataset.from_dict({"input_ids": rows}).save_to_disk(str(tmp_path / "ds"))
    # Enough steps that the loss falls (the sanity check) over fresh rows.
    measure = fast(data={"path": str(tmp_path / "ds")}, steps_per_repeat=10)
    config = make_config(measure=measure, loader_workers=0, micro_batch_size=4)
    result = run_trial(config)
    assert result.status == TrialStatus.OK, result.error_message
    # Each row gives 19 real (input, target) pairs of the 64 positions.
    assert result.padding_share == pytest.approx(1 - 19 / 64)
    real_per_step = result.tokens_per_step * (1 - result.padding_share)
    assert tokens_counted_per_step(result) == pytest.approx(real_per_step)
    assert any("padding" in note for note in result.notes)


def test_a_token_file_missing_on_the_worker_is_an_infra_failure(tmp_path: Path) -> None:
    path = counting_file(tmp_path / "train.bin")
    config = make_config(measure=fast(data={"path": str(path)}), loader_workers=0)
    path.unlink()  # checked on the control side, gone by the time the worker opens it
    result = run_trial(config)
    assert result.status == TrialStatus.FAILED and result.failure_class == "infra"
    assert "no such file or directory" in (result.error_message or "")


def _row(number: int, config: TrialConfig, result: TrialResult, purpose: str = "search") -> Trial:
    """A stored trial row of a real measurement, as the coordinator writes it."""
    return Trial(
        number=number,
        state=TrialState.COMPLETE.value,
        purpose=purpose,
        objective_value=result.tokens_per_s,
        params=config.knobs.model_dump(mode="json"),
        config=config.model_dump(mode="json"),
        result=result.model_dump(mode="json"),
    )


def test_a_starved_winner_is_diagnosed_with_the_measured_loader_fix() -> None:
    """Fault slow_input makes every sample cost 5 ms. Read in the training loop (no loader
    workers) at micro-batch 64, the loop waits for data most of each step; the same slow reads
    spread over two loader workers keep up with a config that computes more slowly per token
    (micro-batch 1 in bf16 with full recomputation: ~18 ms a sample on one quiet CPU, 5.5 ms
    on another, where it was the faster of the two). The waits are measured; which config is
    faster depends on the CPU, so the fed one's tokens/s is set below the starved one's for
    the diagnosis of a starved winner (tested here: what it says, from those waits)."""
    slow = fast(data_source="loader")
    starved = make_config(measure=slow, fault="slow_input", micro_batch_size=64, loader_workers=0)
    fed = make_config(
        measure=slow,
        fault="slow_input",
        micro_batch_size=1,
        precision="bf16",
        checkpointing="full",
        loader_workers=2,
        prefetch_factor=4,
    )
    results = [run_trial(starved), run_trial(fed)]
    for r in results:
        assert r.status == TrialStatus.OK, r.error_message
    starved_result, fed_result = results
    assert starved_result.input_wait_share > INPUT_WAIT_THRESHOLD
    assert fed_result.input_wait_share < starved_result.input_wait_share
    assert starved_result.tokens_per_s and fed_result.tokens_per_s
    scale = 0.8 * starved_result.tokens_per_s / fed_result.tokens_per_s
    fed_result = fed_result.model_copy(
        update={
            k: getattr(fed_result, k) * scale
            for k in (
                "tokens_per_s",
                "tokens_per_s_min",
                "tokens_per_s_max",
                "tokens_per_s_per_gpu",
            )
            if getattr(fed_result, k) is not None
        }
    )  # the winner is the starved one

    rec = recommend(
        [_row(0, starved, starved_result), _row(1, fed, fed_result)], Objective.TOKENS_PER_S
    )
    assert rec is not None and rec["trial_number"] == 0
    diagnosis = rec["input_pipeline"]
    assert diagnosis["bottleneck"] is True
    assert diagnosis["input_wait_share"] == pytest.approx(starved_result.input_wait_share)
    assert diagnosis["fix"]["trial_number"] == 1
    assert diagnosis["fix"]["loader_settings"]["loader_workers"] == 2
    assert diagnosis["text"].startswith("the bottleneck: ")
    assert "workers=2" in diagnosis["text"] and "(trial #1)" in diagnosis["text"]

    # Without a measured alternative, it says what to search instead.
    alone = recommend([_row(0, starved, starved_result)], Objective.TOKENS_PER_S)
    assert alone is not None and alone["input_pipeline"]["fix"] is None
    assert "search the loader knobs" in alone["input_pipeline"]["text"]


def test_synthetic_data_has_no_input_pipeline_to_diagnose() -> None:
    config = make_config()
    result = run_trial(config)
    assert result.status == TrialStatus.OK and result.input_wait_share is None
    rec = recommend([_row(0, config, result)], Objective.TOKENS_PER_S)
    assert rec is not None and "input_pipeline" not in rec


def test_raw_text_is_tokenized_in_the_loader_workers_and_its_padding_counted(
    tmp_path: Path,
) -> None:
    """A JSON-lines corpus read with its tokenizer: each document is one sequence of its own
    tokens (cut at seq_len+1 or padded), the same whether the training loop or forked loader
    workers tokenize it, and the trial reports the padding apart from real tokens."""
    from tokenizers import Tokenizer

    from tests.textdata import documents, write_corpus

    corpus, tokenizer_path = write_corpus(tmp_path)
    data = {"path": str(corpus), "tokenizer": str(tokenizer_path)}
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    expected = [tokenizer.encode(text).ids[:65] for text in documents()]  # seq_len 64, +1

    for workers in (0, 2):
        info: dict = {"notes": []}
        config = make_config(measure=fast(data=data), loader_workers=workers, micro_batch_size=4)
        build_step(config, CPU, info)
        batches = info["_batches"]
        try:
            for _ in range(3):
                x, y = batches.next()
                assert x.shape == y.shape == (4, 64)
                for row_x, row_y in zip(x.tolist(), y.tolist(), strict=True):
                    real = [t for t in row_y if t != -100]
                    # The row is one whole document's tokens: inputs, then the targets shifted.
                    assert (row_x[: len(real)], real) in [(ids[:-1], ids[1:]) for ids in expected]
        finally:
            batches.close()

    result = run_trial(make_config(measure=fast(data=data, steps_per_repeat=6), loader_workers=2))
    assert result.status == TrialStatus.OK, result.error_message
    # Rows are drawn at random: the padding share is near the corpus's mean.
    mean_padding = sum(1 - (len(ids) - 1) / 64 for ids in expected) / len(expected)
    assert result.padding_share == pytest.approx(mean_padding, abs=0.15)
    assert result.input_wait_share is not None
    assert tokens_counted_per_step(result) == pytest.approx(
        result.tokens_per_step * (1 - result.padding_share)
    )


def test_a_prefetch_factor_without_loader_workers_is_not_named_as_a_fix() -> None:
    """With no loader workers DataLoader ignores prefetch_factor: a config that differs only
    in it has the same loader, so its lower wait is noise, not a fix; workers are one."""
    from tests.fakes import measured

    data = fast(data_source="loader")
    best = make_config(measure=data, loader_workers=0, prefetch_factor=2)
    same_loader = make_config(measure=data, loader_workers=0, prefetch_factor=8)
    workers = make_config(measure=data, loader_workers=4, prefetch_factor=8)
    rows = [
        _row(0, best, measured(5000.0, input_wait_share=0.34)),
        _row(1, same_loader, measured(4500.0, input_wait_share=0.29)),
    ]
    rec = recommend(rows, Objective.TOKENS_PER_S)
    assert rec is not None and rec["trial_number"] == 0
    assert rec["input_pipeline"]["fix"] is None
    assert "prefetch" not in rec["input_pipeline"]["text"]  # it does nothing at 0 workers
    rows.append(_row(2, workers, measured(4000.0, input_wait_share=0.02)))
    rec = recommend(rows, Objective.TOKENS_PER_S)
    assert rec is not None and rec["input_pipeline"]["fix"]["trial_number"] == 2
    assert "workers=4, pinned, prefetch=8 removed it" in rec["input_pipeline"]["text"]


def test_a_winner_that_fixed_the_starved_default_says_so() -> None:
    """The H200 case (bench/results/input_starvation_h200): the default loader waited most of
    each step, the winner's loader settings not at all; the recommendation is not starved, and
    says which measured settings removed the default's bottleneck."""
    from tests.fakes import measured

    data = fast(data_source="loader")
    default = make_config(measure=data, loader_workers=0, pin_memory=False)
    workers = make_config(measure=data, loader_workers=8, prefetch_factor=2)
    rows = [
        _row(
            0,
            default,
            measured(60_000.0, input_wait_share=0.88, gpu_idle_share=0.77),
            Purpose.EXPERT_DEFAULT,
        ),
        _row(1, workers, measured(293_000.0, input_wait_share=0.002, gpu_idle_share=0.001)),
    ]
    rec = recommend(rows, Objective.TOKENS_PER_S)
    assert rec is not None and rec["trial_number"] == 1
    pipeline = rec["input_pipeline"]
    assert pipeline["bottleneck"] is False and pipeline["default"]["trial_number"] == 0
    assert pipeline["text"] == (
        "not the bottleneck: 0.2% of step time waiting for data, GPU idle 0%; at the default "
        "loader settings (workers=0, no pinned, trial #0) it was the bottleneck, 88% of step "
        "time waiting for data, GPU idle 77%: these loader settings removed it"
    )
    # A default that was not starved adds nothing.
    rows[0] = _row(0, default, measured(60_000.0, input_wait_share=0.01), Purpose.EXPERT_DEFAULT)
    rec = recommend(rows, Objective.TOKENS_PER_S)
    assert rec is not None and "default" not in rec["input_pipeline"]
