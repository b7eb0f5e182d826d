"""The user's own tokens (`MeasureSettings.data`): what they are, checked before any trial runs.

Two formats, never downloaded:
- `bin`: a flat nanoGPT-style token file, uint16 (nanoGPT's) or uint32 (`dtype: uint32`, or a
  file name saying `uint32`, e.g. `train.uint32.bin`), memory-mapped with numpy.
- `hf`: a Hugging Face `datasets` directory written by `save_to_disk`, one sequence of token
  ids per row (column `input_ids` unless `column` says otherwise). Needs the `datasets`
  package; without it the error names the package.

`inspect` runs on the control side before a study is written (study/operations.py), so a
missing file, a wrong dtype or a vocab mismatch is one clear error and not a failed trial per
config; the worker opens the same data again with `scan_ids=False` (its path is read on the
worker machine). numpy and pyarrow only: no torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    format: str  # "bin" | "hf"
    dtype: str | None  # "uint16" | "uint32" for bin
    tokens: int
    rows: int | None = None  # hf: sequences in the dataset
    max_id: int | None = None  # None when not scanned

    def describe(self) -> str:
        if self.format == "bin":
            return f"{self.path} ({self.dtype} token file, {self.tokens:,} tokens)"
        return f"{self.path} (datasets directory, {self.rows:,} rows, {self.tokens:,} tokens)"


def data_format(data: DataFile) -> str:
    """`bin` or `hf`: as given, or a directory is `hf` and a file `bin`."""
    if data.format != "auto":
        return data.format
    return "hf" if Path(data.path).is_dir() else "bin"


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
    if data_format(data) == "bin":
        found = _inspect_bin(path, bin_dtype(data), model.seq_len, scan_ids)
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
