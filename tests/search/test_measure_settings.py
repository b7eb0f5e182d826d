"""Measurement settings (data_source, repeats...) live in `measure`, never among the knobs; rows
and landscapes stored while data_source was a knob still read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotuner.executors.replay import Landscape
from autotuner.search.space import SpaceError, load_space, parse_space
from autotuner.spec import DataSource, Knobs, MeasureSettings, TrialConfig
from autotuner.storage.models import Trial
from tests.fakes import measured


@pytest.mark.parametrize(
    ("text", "line", "where", "fix"),
    [
        (
            "name: s\nknobs:\n  micro_batch_size: [4]\n  data_source: [synthetic, loader]\n",
            4,
            "knobs.data_source",
            "measure: {data_source: synthetic}",
        ),
        (
            "name: s\nknobs:\n  micro_batch_size: [4]\nfixed:\n  data_source: loader\n",
            5,
            "fixed.data_source",
            "measure: {data_source: loader}",
        ),
        (
            "name: s\nknobs:\n  micro_batch_size: [4]\nfixed:\n  repeats: 5\n",
            5,
            "fixed.repeats",
            "measure: {repeats: 5}",
        ),
        (
            "name: s\nknobs:\n  micro_batch_size: [4]\nrules:\n  - if: {data_source: [loader]}\n"
            "    then: {micro_batch_size: [4]}\n    why: x\n",
            5,
            "rules[0].if.data_source",
            "measure: {data_source: loader}",
        ),
    ],
)
def test_a_measurement_setting_listed_as_a_knob_is_refused_with_the_fix(
    tmp_path: Path, text: str, line: int, where: str, fix: str
) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(SpaceError) as err:
        load_space(str(path))
    message = str(err.value)
    assert message.startswith(f"{path}: line {line}: {where}: ")
    assert "is a measurement setting, not a knob" in message and fix in message


def test_the_measure_section_takes_the_data_source() -> None:
    space = parse_space(
        {"name": "s", "knobs": {"loader_workers": [0, 4]}, "measure": {"data_source": "loader"}}
    )
    assert space.measure.data_source == DataSource.LOADER
    assert "data_source" not in Knobs.knob_names()
    for name in ("single-gpu", "single-gpu-quick", "cpu-demo", "multi-gpu"):
        builtin = load_space(name)
        assert not {*builtin.knobs, *builtin.fixed} & set(MeasureSettings.model_fields), name


def test_data_implies_file_and_must_be_an_absolute_path() -> None:
    settings = MeasureSettings.model_validate({"data": {"path": "/data/train.bin"}})
    assert settings.data_source == DataSource.FILE and settings.data is not None
    with pytest.raises(ValueError, match="relative; give an absolute path"):
        MeasureSettings.model_validate({"data": {"path": "train.bin"}})
    with pytest.raises(ValueError, match="data_source 'file' needs data"):
        MeasureSettings.model_validate({"data_source": "file"})
    with pytest.raises(ValueError, match="data is given but data_source is 'synthetic'"):
        MeasureSettings.model_validate({"data_source": "synthetic", "data": {"path": "/x.bin"}})


def test_rows_stored_with_data_source_among_the_knobs_read_back() -> None:
    old_config = {
        "model": {
            "preset": "tiny",
            "family": "gpt2",
            "n_layer": 2,
            "d_model": 64,
            "n_head": 2,
            "vocab_size": 1024,
            "seq_len": 64,
        },
        "knobs": {"micro_batch_size": 8, "data_source": "loader", "loader_workers": 4},
        "measure": {"repeats": 2},
    }
    row = Trial(number=0, params={"data_source": "loader"}, config=old_config)
    knobs = row.knobs
    assert knobs is not None and knobs.micro_batch_size == 8 and knobs.loader_workers == 4
    config = TrialConfig.model_validate(old_config)
    # What that trial measured moves to where it belongs now.
    assert config.measure.data_source == DataSource.LOADER and config.measure.repeats == 2
    assert "data_source" not in config.knobs.model_dump()


def test_a_landscape_recorded_with_data_source_replays_its_synthetic_entries(
    tmp_path: Path,
) -> None:
    ok = measured(1000.0).model_dump(mode="json")
    entries = [
        {"params": {"micro_batch_size": 8, "data_source": "synthetic"}, "result": ok},
        {"params": {"micro_batch_size": 8, "data_source": "loader"}, "result": ok},
        {"params": {"micro_batch_size": 16}, "result": ok},
    ]
    path = tmp_path / "landscape.json"
    path.write_text(json.dumps(entries))
    loaded = Landscape.load(path)
    assert [p for p, _ in loaded.entries] == [{"micro_batch_size": 8}, {"micro_batch_size": 16}]
