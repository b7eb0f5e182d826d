"""The user's own tokens (`MeasureSettings.data`): what they are, checked before any trial runs.

Two formats, never downloaded:
- `bin`: a flat nanoGPT-style token file, uint16 (nanoGPT's) or uint32 (`dtype: uint32`, or a
  file name saying `uint32`, e.g. `train.uint32.bin`), memory-mapped with numpy.
- `hf`: a Hugging Face `datasets` directory written by `save_to_disk`, one sequence of token
  ids per row (column `input_ids` unless `column` says otherwise). Needs the `datasets`
  package; without it the error names the package.
- `jsonl`: raw text, one JSON object per line (the document in `text_field`, default `text`),
  tokenized on the fly by the worker's loader with a Hugging Face `tokenizer.json` (the
  `tokenizers` package); the lines are indexed once (`line_offsets`), read by offset.

`inspect` runs on the control side before a study is written (study/operations.py), so a
missing file, a wrong dtype or a vocab mismatch is one clear error and not a failed trial per
config; the worker opens the same data again with `scan_ids=False` (its path is read on the
worker machine). numpy and pyarrow only: no torch here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotuner.inputs import UserError
from autotuner.spec import DataFile, ModelSpec

_SCAN_CHUNK = 1 << 26  # tokens per chunk while scanning for the largest id (128-256 MiB)


class DataError(UserError):
    """Token data a trial cannot use; the message says what to fix."""


@dataclass(frozen=True)
class TokenData:
    """What `inspect` found: the format, the numpy dtype of a `bin` file, the token count."""

    path: Path
    format: str  # "bin" | "hf" | "jsonl"
    dtype: str | None  # "uint16" | "uint32" for bin
    tokens: int | None  # None for jsonl: known only once tokenized, trial by trial
    rows: int | None = None  # hf: sequences in the dataset; jsonl: documents (non-empty lines)
    max_id: int | None = None  # None when not scanned
    offsets: Any = field(default=None, repr=False, compare=False)  # jsonl: line_offsets()

    def describe(self) -> str:
        if self.format == "bin":
            return f"{self.path} ({self.dtype} token file, {self.tokens:,} tokens)"
        if self.format == "jsonl":
            return f"{self.path} (JSON lines, {self.rows:,} documents, tokenized as read)"
        return f"{self.path} (datasets directory, {self.rows:,} rows, {self.tokens:,} tokens)"


JSONL_SUFFIXES = (".jsonl", ".json")


def data_format(data: DataFile) -> str:
    """`bin`, `hf` or `jsonl`: as given, or a directory is `hf`, a .jsonl/.json file `jsonl`
    and any other file `bin`."""
    if data.format != "auto":
        return data.format
    path = Path(data.path)
    if path.is_dir():
        return "hf"
    return "jsonl" if path.suffix.lower() in JSONL_SUFFIXES else "bin"


def bin_dtype(data: DataFile) -> str:
    """uint16 (nanoGPT) unless `dtype` or the file name says uint32."""
    if data.dtype != "auto":
        return data.dtype
    return "uint32" if "uint32" in Path(data.path).name.lower() else "uint16"


def inspect(data: DataFile, model: ModelSpec, *, scan_ids: bool = True) -> TokenData:
    """Check the data against the model: it exists, it is whole tokens, it holds at least one
    training window, and (scan_ids) no token id is outside the vocabulary."""
    path = Path(data.path)
    if not path.exists():
        raise DataError(
            f"data {path}: no such file or directory; the path is read where the trials run, "
            "so it must exist there (and here, where it is checked before the study starts)"
        )
    fmt = data_format(data)
    if fmt == "bin":
        found = _inspect_bin(path, bin_dtype(data), model.seq_len, scan_ids)
    elif fmt == "jsonl":
        found = _inspect_jsonl(path, data, model)  # the tokenizer bounds the ids: no scan
    else:
        found = _inspect_hf(path, data.column, scan_ids)
    if found.max_id is not None and found.max_id >= model.vocab_size:
        fix = (
            f"read as {found.dtype}: if it was written as the other width, set data.dtype"
            if found.format == "bin"
            else f"column {data.column!r}: check it holds this tokenizer's ids"
        )
        raise DataError(
            f"data {path}: token id {found.max_id:,} is outside the model's vocab_size "
            f"{model.vocab_size:,}; either the data has the wrong dtype ({fix}) or the model "
            f"spec the wrong vocab_size (set vocab_size >= {found.max_id + 1:,})"
        )
    return found


def _inspect_bin(path: Path, dtype: str, seq_len: int, scan_ids: bool) -> TokenData:
    if path.is_dir():
        raise DataError(
            f"data {path}: a directory; format bin reads a flat token file (a directory is read "
            "as a Hugging Face datasets directory with format hf)"
        )
    width = 4 if dtype == "uint32" else 2
    size = path.stat().st_size
    if size % width:
        raise DataError(
            f"data {path}: {size:,} bytes is not a whole number of {dtype} tokens ({width} bytes "
            "each); check data.dtype, or that this is a flat token file"
        )
    tokens = size // width
    if tokens < seq_len + 1:
        raise DataError(
            f"data {path}: {tokens:,} {dtype} tokens, fewer than one training window of "
            f"seq_len+1 = {seq_len + 1:,}; use a larger file or a shorter seq_len"
        )
    max_id = _max_token(path, dtype, tokens) if scan_ids else None
    return TokenData(path, "bin", dtype, tokens, max_id=max_id)


def _max_token(path: Path, dtype: str, tokens: int) -> int:
    import numpy as np

    ids = np.memmap(path, dtype=dtype, mode="r", shape=(tokens,))
    return max(int(ids[i : i + _SCAN_CHUNK].max()) for i in range(0, tokens, _SCAN_CHUNK))


def load_hf_dataset(path: Path) -> Any:
    """The `datasets.Dataset` saved at `path` (memory-mapped Arrow; nothing is downloaded)."""
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"data {path}: a Hugging Face datasets directory; reading it needs the `datasets` "
            "package here and on the workers (pip install datasets), or convert it to a .bin "
            "token file"
        ) from None
    try:
        loaded = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError, OSError) as exc:
        raise DataError(
            f"data {path}: not a dataset written by save_to_disk ({exc}); "
            "give a datasets directory or a .bin token file"
        ) from None
    if isinstance(loaded, datasets.DatasetDict):
        splits = ", ".join(loaded)
        raise DataError(
            f"data {path}: holds several splits ({splits}); point it at one split's "
            f"directory (e.g. {path / next(iter(loaded))})"
        )
    return loaded


def _inspect_hf(path: Path, column: str, scan_ids: bool) -> TokenData:
    dataset = load_hf_dataset(path)
    import pyarrow.compute as pc  # present: `datasets` depends on it

    if column not in dataset.column_names:
        raise DataError(
            f"data {path}: no column {column!r} (columns: {', '.join(dataset.column_names)}); "
            "set data.column to the column of token ids"
        )
    ids = dataset.data.table.column(column)
    if not str(ids.type).startswith(("list", "large_list")):
        raise DataError(
            f"data {path}: column {column!r} is {ids.type}, not a list of token ids per row; "
            "tokenize the dataset first (one list of ids per row)"
        )
    lengths = pc.list_value_length(ids)
    longest = pc.max(lengths).as_py() or 0
    if longest < 2:
        raise DataError(
            f"data {path}: no row of {column!r} has two tokens; a training sequence needs at "
            "least an input token and the next one"
        )
    max_id = None
    if scan_ids:
        flat = pc.list_flatten(ids)
        low = pc.min(flat).as_py()
        if low is not None and low < 0:
            raise DataError(
                f"data {path}: column {column!r} holds the negative id {low}; token ids are "
                "0 .. vocab_size-1 (a labels column with -100 is not token ids)"
            )
        max_id = pc.max(flat).as_py()
    return TokenData(
        path, "hf", None, int(pc.sum(lengths).as_py()), rows=len(dataset), max_id=max_id
    )


def line_offsets(path: Path) -> Any:
    """The byte offsets where the file's non-empty lines start and, last, the file's size:
    document i is bytes [offsets[i], offsets[i+1]) (blank lines after it included: JSON
    ignores the whitespace). One pass in 64 MiB chunks with numpy, so a multi-GB corpus is
    indexed in seconds and held as 8 bytes a document."""
    import numpy as np

    size = path.stat().st_size
    if size == 0:
        return np.array([0], dtype=np.int64)
    starts = [np.zeros(1, dtype=np.int64)]
    with open(path, "rb") as f:
        base = 0
        while chunk := f.read(1 << 26):
            newlines = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 0x0A)
            starts.append(newlines.astype(np.int64) + base + 1)
            base += len(chunk)
    lines = np.concatenate(starts)
    lines = lines[lines < size]  # a final newline starts no line
    text = np.memmap(path, dtype=np.uint8, mode="r", shape=(size,))
    documents = lines[text[lines] != 0x0A]  # a line that starts with its newline is empty
    return np.append(documents, size)


def load_tokenizer(path: Path) -> Any:
    """The `tokenizers.Tokenizer` in a Hugging Face `tokenizer.json` (nothing downloaded)."""
    try:
        import tokenizers
    except ImportError:
        raise DataError(
            f"tokenizer {path}: reading text data needs the `tokenizers` package here and on "
            "the workers (pip install tokenizers), or tokenize the data first into a .bin file"
        ) from None
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise DataError(
            f"tokenizer {path}: no such file; give the tokenizer.json of a Hugging Face "
            "tokenizer (e.g. the one save_pretrained writes) or its directory"
        )
    try:
        return tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises its own Exception subclass for bad JSON
        raise DataError(
            f"tokenizer {path}: not a Hugging Face tokenizer.json ({exc}); give the file "
            "save_pretrained writes (a fast tokenizer)"
        ) from None


def _inspect_jsonl(path: Path, data: DataFile, model: ModelSpec) -> TokenData:
    import json

    if path.is_dir():
        raise DataError(f"data {path}: a directory; format jsonl reads one JSON-lines file")
    if data.tokenizer is None:
        raise DataError(
            f"data {path}: raw text needs a tokenizer to read it with: set data.tokenizer, "
            "the path of a Hugging Face tokenizer.json (or its directory)"
        )
    tokenizer = load_tokenizer(Path(data.tokenizer))
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    if vocab > model.vocab_size:
        raise DataError(
            f"tokenizer {data.tokenizer}: {vocab:,} tokens, more than the model's vocab_size "
            f"{model.vocab_size:,}; use this tokenizer's model (set vocab_size >= {vocab:,})"
        )
    offsets = line_offsets(path)
    documents = len(offsets) - 1
    if documents == 0:
        raise DataError(f"data {path}: no documents (every line is empty)")
    with open(path, "rb") as f:
        f.seek(int(offsets[0]))
        first = f.readline()
    try:
        record = json.loads(first)
    except ValueError as exc:
        raise DataError(
            f"data {path}: the first document is not a JSON object ({exc}); format jsonl "
            "reads one JSON object per line"
        ) from None
    if not isinstance(record, dict) or not isinstance(record.get(data.text_field), str):
        fields = ", ".join(record) if isinstance(record, dict) else type(record).__name__
        raise DataError(
            f"data {path}: the first document has no text field {data.text_field!r} "
            f"(found: {fields}); set data.text_field to the field that holds the text"
        )
    return TokenData(path, "jsonl", None, None, rows=documents, offsets=offsets)
