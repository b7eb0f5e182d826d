"""Datasets the loader reads: windows of a flat token file, rows of a `datasets` directory, or
documents of a JSON-lines text file tokenized as they are read.

Both are opened lazily in each loader process (worker processes must not share a memory map
or an Arrow handle) and return (x, y) int64 pairs of seq_len tokens, y shifted by one.

A flat file has no sequence boundaries: any seq_len+1 tokens make a window (nanoGPT's way).
A dataset row (or a text document) is one sequence: a longer row is cut at seq_len+1 tokens, a
shorter one padded, its padded targets set to IGNORE_INDEX, which the models' cross-entropy
skips (torch's default ignore_index), so padding trains nothing and is counted apart from real
tokens.

Text is tokenized in whichever process reads it: the training loop with no loader workers, else
each worker. That is the work an input pipeline of raw text does, and what the loader knobs
(workers, prefetch) spread out.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch.utils.data import Dataset

from autotuner.datafiles import (
    DataError,
    bin_dtype,
    data_format,
    inspect,
    load_hf_dataset,
    load_tokenizer,
)
from autotuner.spec import DataFile, ModelSpec

IGNORE_INDEX = -100  # F.cross_entropy's default: targets with this value add no loss
PAD_INPUT = 0  # the input id under a padded position (its target is ignored)


class TokenWindows(Dataset):
    """(x, y) windows of seq_len tokens from a flat token file of `tokens` ids."""

    def __init__(self, path: Path, dtype, seq_len: int, tokens: int, vocab: int | None = None):
        self.path, self.dtype, self.seq_len, self.tokens = path, dtype, seq_len, tokens
        self.vocab = vocab  # check each window against it (a user's file); None: trusted
        self._ids = None

    def __len__(self) -> int:
        return self.tokens - self.seq_len

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        import numpy as np  # present: the file was written or inspected with it

        if self._ids is None:
            self._ids = np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.tokens,))
        window = self._ids[i : i + self.seq_len + 1]
        if self.vocab is not None and int(window.max()) >= self.vocab:
            # The control side scanned the file; this one may differ (another machine's copy).
            raise ValueError(
                f"{self.path}: token id {int(window.max())} near offset {i} is outside "
                f"vocab_size {self.vocab}: wrong data.dtype or wrong vocab_size"
            )
        chunk = torch.from_numpy(window.astype(np.int64))
        return chunk[:-1], chunk[1:]


def _sequence(ids: torch.Tensor, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) of one sequence's ids (at most seq_len+1 of them): padded to seq_len, the padded
    targets IGNORE_INDEX."""
    x = torch.full((seq_len,), PAD_INPUT, dtype=torch.long)
    y = torch.full((seq_len,), IGNORE_INDEX, dtype=torch.long)
    n = ids.numel() - 1  # real (input, target) pairs in this row
    if n > 0:
        x[:n], y[:n] = ids[:-1], ids[1:]
    return x, y


class DatasetRows(Dataset):
    """(x, y) from the rows of a `datasets` directory: cut at seq_len+1 or padded up to it."""

    def __init__(self, path: Path, column: str, seq_len: int, rows: int):
        self.path, self.column, self.seq_len, self.rows = path, column, seq_len, rows
        self._dataset = None

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._dataset is None:
            loaded = load_hf_dataset(self.path)
            self._dataset = loaded.select_columns([self.column]).with_format("numpy")
        ids = torch.as_tensor(self._dataset[i][self.column][: self.seq_len + 1], dtype=torch.long)
        return _sequence(ids, self.seq_len)


class TextDocuments(Dataset):
    """(x, y) from the documents of a JSON-lines file, tokenized when read: the whole document
    is encoded, then cut at seq_len+1 tokens or padded (as `tokenizer(text, truncation=True)`
    does in a training script)."""

    def __init__(self, path: Path, text_field: str, tokenizer: Path, seq_len: int, offsets):
        self.path, self.text_field, self.tokenizer_path = path, text_field, tokenizer
        self.seq_len, self.offsets = seq_len, offsets  # datafiles.line_offsets(path)
        self._opened: tuple[int, int, object] | None = None  # (pid, fd, tokenizer)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _open(self) -> tuple[int, object]:
        # Per process: a loader worker is a fork, and must neither share the parent's file
        # position (pread takes none) nor a tokenizer whose thread pool the fork did not copy.
        pid = os.getpid()
        if self._opened is None or self._opened[0] != pid:
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            fd = os.open(self.path, os.O_RDONLY)
            self._opened = (pid, fd, load_tokenizer(self.tokenizer_path))
        return self._opened[1], self._opened[2]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        fd, tokenizer = self._open()
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        line = os.pread(fd, end - start, start)
        try:
            text = json.loads(line)[self.text_field]
        except (ValueError, KeyError, TypeError):
            raise DataError(
                f"data {self.path}: the document at byte {start:,} is not a JSON object with a "
                f"text field {self.text_field!r}; every line must be one"
            ) from None
        ids = tokenizer.encode(text, add_special_tokens=False).ids[: self.seq_len + 1]
        return _sequence(torch.tensor(ids, dtype=torch.long), self.seq_len)


def user_dataset(data: DataFile, spec: ModelSpec) -> tuple[Dataset, bool]:
    """The dataset over the user's data, and whether it can pad (dataset rows and text can).

    Checks the data again here, on the worker machine (cheaply: the control side scanned the
    ids before the study started)."""
    found = inspect(data, spec, scan_ids=False)
    fmt = data_format(data)
    if fmt == "bin":
        windows = TokenWindows(
            found.path, bin_dtype(data), spec.seq_len, found.tokens, vocab=spec.vocab_size
        )
        return windows, False
    if fmt == "jsonl":
        assert data.tokenizer is not None  # inspect refuses text without a tokenizer
        text = TextDocuments(
            found.path, data.text_field, Path(data.tokenizer), spec.seq_len, found.offsets
        )
        return text, True
    return DatasetRows(found.path, data.column, spec.seq_len, found.rows or 0), True
