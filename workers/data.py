"""Training batches: synthetic tokens on the device, or a real DataLoader over a token file.

Synthetic: `grad_accum` fixed micro-batches generated on the device once and replayed every
optimizer step. The data path then costs nothing, and since every step sees the same batches the
loss must fall step over step (the sanity check in docs/measurement.md: a config that does not train
shows up as a loss that does not fall).

Loader (MeasureSettings.data_source `loader`): a token file written to a temp dir, read through
torch.utils.data.DataLoader with the knobs' workers / pin_memory / prefetch_factor, copied to
the device with non_blocking=True. What a real input pipeline costs is then part of the
measured step. File (`file`): the user's own tokens (workers/token_data.py) through the same
DataLoader.

Parity: a learnable stream for the loss-parity trial (MeasureSettings.parity_steps), fresh
batches every step from a seeded generator on the CPU, so every config of one model and batch
shape sees the same tokens whatever its device or precision.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

from autotuner.spec import DataSource, Knobs, MeasureSettings, ModelSpec
from workers.errors import UnsupportedConfig
from workers.faults import SlowInput
from workers.token_data import IGNORE_INDEX, TokenWindows, user_dataset

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
        # Each micro-batch a tensor of its own, not a view into one (accum, ...) block: a view
        # is another graph input to torch.compile (its storage is the whole block), so a
        # config measured with accumulation compiled graphs that a re-run at another
        # grad_accum (the numerics check runs one micro-batch a step) could not take from the
        # study's cache: on the H200 an fp8 parity trial compiled ~140 s where its warm
        # headroom check took 59 s (bench/results/h200_session_20261202).
        self._x = [t[:, :-1].clone() for t in tokens.unbind(0)]
        self._y = [t[:, 1:].clone() for t in tokens.unbind(0)]
        self._i = 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        i = self._i
        self._i = (i + 1) % len(self._x)
        return self._x[i], self._y[i]

    def close(self) -> None:
        pass


def write_token_file(directory: Path, vocab: int, seed: int):
    """A flat token file: one random "document" repeated. Returns (path, numpy dtype)."""
    try:
        import numpy as np
    except ImportError as exc:
        raise UnsupportedConfig(
            "measure.data_source 'loader' needs numpy on the worker (pip install numpy); "
            "or measure with 'synthetic'"
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
    """Micro-batches from a real DataLoader over `dataset` with the loader knobs; an endless
    random sampler, so it never runs dry.

    Counts what the measurement reports: `wait_s`, the time the training loop spent blocked
    on the next batch (the loader's next() and the host-to-device copy), and for a dataset
    that pads, the padded and total target positions read.
    """

    def __init__(
        self,
        dataset: Dataset,
        knobs: Knobs,
        device: torch.device,
        seed: int,
        *,
        pads: bool = False,
        temp_dir: Path | None = None,
    ):
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
        self._dir = temp_dir
        self.pads = pads
        self.wait_s = 0.0
        self.positions = 0
        self.padding = 0

    @classmethod
    def generated(cls, vocab: int, knobs: Knobs, seq_len: int, device, seed: int, wrap=None):
        """Over a learnable token file written to a temp dir (data_source `loader`)."""
        directory = Path(tempfile.mkdtemp(prefix="autotuner-tokens-"))
        path, dtype = write_token_file(directory, vocab, seed)
        dataset = TokenWindows(path, dtype, seq_len, LOADER_FILE_TOKENS)
        return cls(wrap(dataset) if wrap else dataset, knobs, device, seed, temp_dir=directory)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        t0 = time.perf_counter()
        x, y = next(self._it)
        # non_blocking only overlaps the copy when the source is pinned; harmless otherwise.
        x_dev = x.to(self._device, non_blocking=True)
        y_dev = y.to(self._device, non_blocking=True)
        self.wait_s += time.perf_counter() - t0
        if self.pads:  # on the host copy: no device sync
            self.padding += int((y == IGNORE_INDEX).sum())
            self.positions += y.numel()
        return x_dev, y_dev

    def close(self) -> None:
        # Stop the worker processes before the temp file goes away.
        del self._it
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)


class InputCounters:
    """The loader's counters over the timed repeats only (warm-up excluded): time blocked on
    the next batch, and padded / total target positions. Inactive for synthetic batches."""

    def __init__(self, batches) -> None:
        self.batches = batches
        self.active = hasattr(batches, "wait_s")
        self._start = self._read()

    def _read(self) -> tuple[float, int, int]:
        b = self.batches
        return (b.wait_s, b.padding, b.positions) if self.active else (0.0, 0, 0)

    def stop(self) -> None:
        (w0, p0, n0), (w1, p1, n1) = self._start, self._read()
        self.waited, self.padding, self.positions = w1 - w0, p1 - p0, n1 - n0

    def wait_share(self, measured_s: float, ranks) -> float | None:
        if not self.active:
            return None
        return min(1.0, ranks.slowest(self.waited) / max(measured_s, 1e-9))

    def padding_share(self) -> float | None:
        if not self.active or not getattr(self.batches, "pads", False):
            return None
        return self.padding / self.positions if self.positions else 0.0


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
    measure: MeasureSettings,
    spec: ModelSpec,
    device: torch.device,
    seed: int,
    *,
    slow_input: bool = False,
):
    """The batches `measure` asks for: the parity stream, synthetic tokens, or a real DataLoader
    over the generated file or the user's data (fault slow_input slows the loader's reads)."""
    vocab, seq_len = spec.vocab_size, spec.seq_len
    if measure.parity_steps is not None and not measure.headroom_check:
        # A parity trial; with the headroom check the parity steps are a prelude on a stream
        # of their own (workers/trial.py) and these are the measured steps' batches.
        return ParityBatches(vocab, knobs.micro_batch_size, seq_len, device, seed)
    if measure.data_source == DataSource.SYNTHETIC:
        return SyntheticBatches(
            vocab, knobs.micro_batch_size, seq_len, knobs.grad_accum, device, seed
        )
    wrap = SlowInput if slow_input else None
    if measure.data_source == DataSource.LOADER:
        return LoaderBatches.generated(vocab, knobs, seq_len, device, seed, wrap)
    assert measure.data is not None  # MeasureSettings: data_source file comes with data
    dataset, pads = user_dataset(measure.data, spec)
    return LoaderBatches(wrap(dataset) if wrap else dataset, knobs, device, seed, pads=pads)
