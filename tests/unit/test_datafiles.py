"""The user's own tokens are checked on the control side before a study starts: each mistake is
one error that says what to fix (missing file, wrong dtype, too short, ids past the vocab)."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from autotuner.datafiles import DataError, inspect
from autotuner.spec import DataFile, ModelSpec
from autotuner.study.data_access import DataAccess
from autotuner.study.operations import validate_request
from autotuner.study.request import StudyRequest

TINY = ModelSpec.resolve({"preset": "tiny"})  # vocab 512, seq_len 64


def _bin(path: Path, ids: np.ndarray) -> DataFile:
    ids.tofile(path)
    return DataFile(path=str(path))


def test_a_valid_uint16_file_is_measured(tmp_path: Path) -> None:
    data = _bin(tmp_path / "train.bin", np.arange(1000, dtype=np.uint16) % 512)
    found = inspect(data, TINY)
    assert (found.format, found.dtype, found.tokens, found.max_id) == ("bin", "uint16", 1000, 511)


def test_the_name_or_the_option_selects_uint32(tmp_path: Path) -> None:
    ids = (np.arange(300, dtype=np.uint32) * 3) % 512
    by_name = _bin(tmp_path / "train.uint32.bin", ids)
    assert inspect(by_name, TINY).dtype == "uint32"
    by_option = DataFile(path=str(_bin(tmp_path / "t.bin", ids).path), dtype="uint32")
    assert inspect(by_option, TINY).tokens == 300


def test_a_missing_file_says_where_it_is_read(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file or directory; the path is read where"):
        inspect(DataFile(path=str(tmp_path / "nope.bin")), TINY)


def test_a_size_that_is_not_whole_tokens_names_the_dtype(tmp_path: Path) -> None:
    path = tmp_path / "odd.uint32.bin"
    path.write_bytes(b"\x01" * 4098)  # 2049 uint16, but not whole uint32 tokens
    with pytest.raises(DataError, match=r"4,098 bytes is not a whole number of uint32 tokens"):
        inspect(DataFile(path=str(path)), TINY)


def test_fewer_tokens_than_one_window_is_refused(tmp_path: Path) -> None:
    data = _bin(tmp_path / "short.bin", np.zeros(64, dtype=np.uint16))  # seq_len+1 = 65
    with pytest.raises(DataError, match="fewer than one training window of seq_len\\+1 = 65"):
        inspect(data, TINY)


def test_ids_past_the_vocab_name_both_fixes(tmp_path: Path) -> None:
    # A uint32 file read as uint16: the high halves are 0, the low ones are large ids.
    data = _bin(tmp_path / "wide.bin", np.full(200, 70_000, dtype=np.uint32))
    with pytest.raises(DataError) as err:
        inspect(data, TINY)
    message = str(err.value)
    assert "outside the model's vocab_size 512" in message
    assert "read as uint16" in message and "data.dtype" in message
    assert "set vocab_size >= 4,465" in message  # 70000 & 0xFFFF = 4464


def test_a_request_with_bad_data_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    data = _bin(tmp_path / "wide.bin", np.full(200, 5000, dtype=np.uint16))
    request = StudyRequest(model="tiny", space="cpu-demo", max_trials=1, data=data)
    with pytest.raises(DataError, match="token id 5,000 is outside"):
        validate_request(request, data_access=DataAccess.anywhere())
    good = _bin(tmp_path / "good.bin", np.arange(200, dtype=np.uint16))
    _, space = validate_request(
        request.model_copy(update={"data": good}), data_access=DataAccess.anywhere()
    )
    assert space.measure.data == good and space.measure.data_source == "file"


def test_a_datasets_directory_is_checked_by_column_and_ids(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = {"input_ids": [[1, 2, 3, 4], [5, 6], [7]], "text": ["a", "b", "c"]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "ds"))
    found = inspect(DataFile(path=str(tmp_path / "ds")), TINY)
    assert (found.format, found.rows, found.tokens, found.max_id) == ("hf", 3, 7, 7)
    with pytest.raises(DataError, match="no column 'ids' \\(columns: input_ids, text\\)"):
        inspect(DataFile(path=str(tmp_path / "ds"), column="ids"), TINY)
    with pytest.raises(DataError, match="column 'text' is string, not a list of token ids"):
        inspect(DataFile(path=str(tmp_path / "ds"), column="text"), TINY)
    big = {"input_ids": [[1, 2, 3000]]}
    datasets.Dataset.from_dict(big).save_to_disk(str(tmp_path / "big"))
    with pytest.raises(DataError, match="token id 3,000 is outside"):
        inspect(DataFile(path=str(tmp_path / "big")), TINY)
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)})
    splits.save_to_disk(str(tmp_path / "splits"))
    with pytest.raises(DataError, match="holds several splits \\(train\\); point it at one"):
        inspect(DataFile(path=str(tmp_path / "splits")), TINY)


def test_without_the_datasets_package_the_error_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ds").mkdir()
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    with pytest.raises(DataError, match=r"needs the `datasets` package .*pip install datasets"):
        inspect(DataFile(path=str(tmp_path / "ds")), TINY)


# ----------------------------------------------------------------------------- raw text (jsonl)


def test_a_jsonl_file_is_indexed_by_document_and_needs_its_tokenizer(tmp_path: Path) -> None:
    from tests.textdata import documents, write_corpus

    corpus, tokenizer = write_corpus(tmp_path)
    found = inspect(DataFile(path=str(corpus), tokenizer=str(tokenizer)), TINY)
    assert found.format == "jsonl" and found.rows == len(documents())  # the blank line skipped
    assert found.tokens is None and "60 documents, tokenized as read" in found.describe()
    # Each offset starts one document's JSON line.
    raw = corpus.read_bytes()
    bounds = [int(o) for o in found.offsets]
    assert bounds[-1] == len(raw)
    ids = [json.loads(raw[a:b])["id"] for a, b in itertools.pairwise(bounds)]
    assert ids == list(range(len(documents())))

    with pytest.raises(DataError, match="raw text needs a tokenizer to read it with: set data"):
        inspect(DataFile(path=str(corpus)), TINY)
    with pytest.raises(DataError, match=r"300 tokens, more than the model's vocab_size 256"):
        inspect(
            DataFile(path=str(corpus), tokenizer=str(tokenizer)),
            ModelSpec.resolve({"preset": "tiny", "vocab_size": 256}),
        )
    with pytest.raises(DataError, match="no text field 'body' \\(found: id, text\\)"):
        inspect(DataFile(path=str(corpus), tokenizer=str(tokenizer), text_field="body"), TINY)
    not_json = tmp_path / "notes.jsonl"
    not_json.write_text("plain text, not JSON\n")
    with pytest.raises(DataError, match="the first document is not a JSON object"):
        inspect(DataFile(path=str(not_json), tokenizer=str(tokenizer)), TINY)
    bad_tokenizer = tmp_path / "bad.json"
    bad_tokenizer.write_text("{}")
    with pytest.raises(DataError, match=r"not a Hugging Face tokenizer\.json"):
        inspect(DataFile(path=str(corpus), tokenizer=str(bad_tokenizer)), TINY)
    with pytest.raises(DataError, match=r"tokenizer .*missing\.json: no such file"):
        inspect(DataFile(path=str(corpus), tokenizer=str(tmp_path / "missing.json")), TINY)


def test_line_offsets_skip_empty_lines_and_keep_an_unterminated_last_line(tmp_path: Path) -> None:
    from autotuner.datafiles import line_offsets

    path = tmp_path / "t.jsonl"
    path.write_bytes(b'\n{"text": "a"}\n\n\n{"text": "b"}\n{"text": "c"}')
    assert [int(o) for o in line_offsets(path)] == [1, 17, 31, 44]
    path.write_bytes(b"")
    assert [int(o) for o in line_offsets(path)] == [0]
