"""Training batches: synthetic tokens on the device, or a real DataLoader over a token file.

Synthetic: `grad_accum` fixed micro-batches generated on the device once and replayed every
optimizer step. The data path then costs nothing, and since every step sees the same batches the
loss must fall step over step (the sanity check in MEASUREMENT.md: a config that does not train
shows up as a loss that does not fall).

Loader: a token file written to a temp dir, read through torch.utils.data.DataLoader with the
knobs' workers / pin_memory / prefetch_factor, copied to the device with non_blocking=True.
What a real input pipeline costs is then part of the measured step.

Parity: a learnable stream for the loss-parity trial (MeasureSettings.parity_steps), fresh
batches every step from a seeded generator on the CPU, so every config of one model and batch
shape sees the same tokens whatever its device or precision.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

from autotuner.spec import DataSource, Knobs
from workers.errors import UnsupportedConfig

LOADER_FILE_TOKENS = 1 << 21  # 2M tokens: 4-8 MiB on disk, many distinct windows
_PERIOD = 4093  # the file repeats one random "document": learnable, so the loss can fall
_ALPHABET = 64


class SyntheticBatches:
    """Replays `accum` fixed (x, y) micro-batches; x, y are (micro_batch, seq_len) int64."""

    def __init__(self, vocab: int, micro_batch: int, seq_len: int, accum: int, device, seed: int):
        gen = torch.Generator(device=device).manual_seed(seed)
        tokens = torch.randint(
            0, vocab, (accum, micro_batch, seq_len + 1), device=device, generator=gen
        )
        self._x = tokens[..., :-1].contiguous()
        self._y = tokens[..., 1:].contiguous()
        self._i = 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        i = self._i
        self._i = (i + 1) % self._x.shape[0]
        return self._x[i], self._y[i]

    def close(self) -> None:
        pass


class TokenWindows(Dataset):
    """(x, y) windows of seq_len tokens from a flat token file (opened lazily per worker)."""

    def __init__(self, path: Path, dtype, seq_len: int):
        self.path, self.dtype, self.seq_len = path, dtype, seq_len
        self._tokens = None

    def __len__(self) -> int:
        return LOADER_FILE_TOKENS - self.seq_len - 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        import numpy as np  # present: write_token_file checked

        if self._tokens is None:  # memmap per process: worker processes must not share the handle
            self._tokens = np.memmap(self.path, dtype=self.dtype, mode="r")
        chunk = torch.from_numpy(self._tokens[i : i + self.seq_len + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]


def write_token_file(directory: Path, vocab: int, seed: int):
    """A flat token file: one random "document" repeated. Returns (path, numpy dtype)."""
    try:
        import numpy as np
    except ImportError as exc:
        raise UnsupportedConfig(
            "data_source 'loader' needs numpy on the worker (pip install numpy); or use 'synthetic'"
        ) from exc
    dtype = np.dtype(np.uint16 if vocab <= 65536 else np.int32)
    rng = np.random.default_rng(seed)
    # A few distinct ids spread over the vocab: the token statistics are learnable within a
    # few steps, so the loss-falls check holds for fresh windows too. Which ids appear does not
    # change the work: every step gathers embeddings and computes logits over the full vocab.
    alphabet = rng.choice(vocab, size=min(vocab, _ALPHABET), replace=False)
    document = rng.choice(alphabet, size=_PERIOD)
    tokens = np.resize(document, LOADER_FILE_TOKENS).astype(dtype)
    path = directory / "tokens.bin"
    tokens.tofile(path)
    return path, dtype


class LoaderBatches:
    """Micro-batches from a real DataLoader; an endless random sampler, so it never runs dry."""

    def __init__(self, vocab: int, knobs: Knobs, seq_len: int, device: torch.device, seed: int):
        self._dir = Path(tempfile.mkdtemp(prefix="autotuner-tokens-"))
        path, dtype = write_token_file(self._dir, vocab, seed)
        dataset = TokenWindows(path, dtype, seq_len)
        sampler = RandomSampler(
            dataset,
            replacement=True,
            num_samples=1 << 40,
            generator=torch.Generator().manual_seed(seed),
        )
        workers = knobs.loader_workers
        # pin_memory only means something with a CUDA device to copy to.
        self.pinned = knobs.pin_memory and device.type == "cuda"
        self.loader = DataLoader(
            dataset,
            batch_size=knobs.micro_batch_size,
            sampler=sampler,
            num_workers=workers,
            pin_memory=self.pinned,
            prefetch_factor=knobs.prefetch_factor if workers > 0 else None,
            persistent_workers=workers > 0,
            drop_last=True,
        )
        self._it = iter(self.loader)
        self._device = device

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = next(self._it)
        # non_blocking only overlaps the copy when the source is pinned; harmless otherwise.
        return (
            x.to(self._device, non_blocking=True),
            y.to(self._device, non_blocking=True),
        )

    def close(self) -> None:
        # Stop the worker processes before the temp file goes away.
        del self._it
        shutil.rmtree(self._dir, ignore_errors=True)


# The parity stream: a walk over _ALPHABET tokens; each next token is the previous one plus a
# step drawn from _PARITY_STEPS with _PARITY_PROBS (mod the alphabet). Its entropy is 0.94 nats
# a token, far below log(vocab): a model that learns the transition table drives the loss from
# log(vocab) towards 0.94, so a recipe that learns worse shows as a higher curve.
_PARITY_STEPS = (1, 2, 3, 5)
_PARITY_PROBS = (0.7, 0.1, 0.1, 0.1)


class ParityBatches:
    """Fresh (x, y) micro-batches of the seeded parity stream, one per call: learnable, the
    same sequence for every config with the same vocab, micro-batch and seq_len."""

    def __init__(self, vocab: int, micro_batch: int, seq_len: int, device, seed: int):
        self._gen = torch.Generator().manual_seed(seed)  # CPU: the same tokens on any device
        k = min(vocab, _ALPHABET)
        self._ids = torch.randperm(vocab, generator=self._gen)[:k]  # the alphabet's token ids
        self._k, self._shape, self._device = k, (micro_batch, seq_len + 1), device
        self._probs = torch.tensor(_PARITY_PROBS)
        self._steps = torch.tensor(_PARITY_STEPS)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        rows, cols = self._shape
        start = torch.randint(0, self._k, (rows, 1), generator=self._gen)
        draws = torch.multinomial(self._probs, rows * (cols - 1), True, generator=self._gen)
        walk = torch.cat([start, self._steps[draws].view(rows, cols - 1)], dim=1)
        tokens = self._ids[walk.cumsum(dim=1) % self._k].to(self._device)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def close(self) -> None:
        pass


def make_batches(
    knobs: Knobs,
    vocab: int,
    seq_len: int,
    device: torch.device,
    seed: int,
    parity: bool = False,
):
    if parity:
        return ParityBatches(vocab, knobs.micro_batch_size, seq_len, device, seed)
    if knobs.data_source == DataSource.LOADER:
        return LoaderBatches(vocab, knobs, seq_len, device, seed)
    return SyntheticBatches(vocab, knobs.micro_batch_size, seq_len, knobs.grad_accum, device, seed)
