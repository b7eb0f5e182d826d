"""How a trial measures: the device, what it reads (`DataSource`, `DataFile`) and the protocol
(`MeasureSettings`: warm-up, repeats, limits, the end checks' settings)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from autotuner.spec.base import _Record


class Device(StrEnum):
    AUTO = "auto"  # cuda when a GPU is visible, else cpu
    CUDA = "cuda"
    CPU = "cpu"


class DataSource(StrEnum):
    """What the measured steps read (a setting of the measurement, not a knob: a training run
    reads its own data, it does not choose among these)."""

    SYNTHETIC = "synthetic"  # random tokens generated on the device: the data path costs nothing
    LOADER = "loader"  # a generated token file through a real torch DataLoader (the loader knobs)
    FILE = "file"  # the user's own tokens (MeasureSettings.data) through the same DataLoader


class DataFile(_Record):
    """The user's own tokens, read where the trial runs (the worker machine); never downloaded.

    - format `bin`: a flat nanoGPT-style token file (uint16, or uint32 when `dtype` or the file
      name says so, e.g. `train.uint32.bin`), memory-mapped; windows of seq_len+1 tokens.
    - format `hf`: a Hugging Face `datasets` directory written by `save_to_disk`, one sequence
      of token ids per row in `column`; a row longer than seq_len+1 is cut, a shorter one padded
      (padding is counted apart from real tokens: TrialResult.padding_share).
    - format `jsonl`: raw text, one JSON object per line with the document in `text_field`,
      tokenized on the fly in the loader by `tokenizer` (a Hugging Face `tokenizer.json`), as a
      training script that tokenizes as it reads does; each document is one sequence, cut or
      padded like an `hf` row. Tokenizing is where input pipelines most often starve a GPU.
    """

    path: str = Field(min_length=1, max_length=4096)
    # auto: a directory is `hf`, a .jsonl/.json file `jsonl`, any other file `bin`
    format: Literal["auto", "bin", "hf", "jsonl"] = "auto"
    dtype: Literal["auto", "uint16", "uint32"] = "auto"  # `bin` only
    column: str = Field(default="input_ids", min_length=1, max_length=200)  # `hf` only
    text_field: str = Field(default="text", min_length=1, max_length=200)  # `jsonl` only
    tokenizer: str | None = Field(default=None, min_length=1, max_length=4096)  # `jsonl` only

    @field_validator("path", "tokenizer")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(
                f"{value!r} is relative; give an absolute path (it is opened on the worker "
                "machine, whose working directory is not yours; `--data` and `--tokenizer` "
                "resolve it for you)"
            )
        return value


class MeasureSettings(_Record):
    """How a trial measures (docs/measurement.md). Defaults suit a GPU; the CPU demo shortens
    them."""

    warmup_min_steps: int = Field(default=3, ge=1, le=1000)
    warmup_max_steps: int = Field(default=30, ge=1, le=10000)
    warmup_stable_rel: float = Field(default=0.05, gt=0, le=1)
    repeats: int = Field(default=3, ge=1, le=100)
    steps_per_repeat: int | None = Field(
        default=None, ge=1, le=100000
    )  # None: auto from min_repeat_s
    min_repeat_s: float = Field(default=1.0, gt=0, le=600)
    timeout_s: float = Field(default=900.0, gt=0, le=86400)
    telemetry_hz: float = Field(default=10.0, ge=0, le=100)
    seed: int = 0
    device: Device = Device.AUTO
    # Caps memory for the trial (GiB): the CUDA per-process fraction on a GPU, RLIMIT_AS on the
    # CPU. None: the device's full memory. Used to model smaller GPUs and to provoke OOM in tests.
    memory_limit_gib: float | None = Field(default=None, gt=0)
    peak_flops: float | None = Field(default=None, gt=0)  # override the per-GPU peak table
    cpu_threads: int | None = Field(default=None, ge=1, le=1024)
    # Multi-GPU trials: set NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
    # NVSHMEM_DISABLE_NVLS=1 in every rank. The lent H200 machines do not support NVLink
    # multicast (NVLS) in their VMs; left on, NCCL/symmetric memory may try it and fail or hang
    # at init. A documented setting, not a hidden default: turn it off where NVLS works.
    disable_nvls_multicast: bool = True
    # A loss-parity trial (the numerics check of a recommendation, docs/measurement.md "fp8 and
    # other numerics changes"): None (default) runs the timing protocol. A number N trains N
    # optimizer steps from `seed` on a learnable token stream (workers/data.py ParityBatches:
    # the same tokens for every config of one model and batch shape), records every step's
    # loss in TrialResult.loss_curve and skips warm-up and the timed repeats; its tokens/s
    # counts the first (compiling) step too and is no measurement. With `headroom_check` the
    # N steps (one micro-batch each) come first and the trial then runs as measured: the
    # numerics check's candidate run and the headroom check in one process and one compile.
    parity_steps: int | None = Field(default=None, ge=2, le=100_000)
    # The measurement's input: synthetic tokens (default), the generated loader file, or the
    # user's own tokens (`data`; giving `data` alone implies data_source `file`).
    data_source: DataSource = DataSource.SYNTHETIC
    data: DataFile | None = None

    @model_validator(mode="before")
    @classmethod
    def _data_implies_file(cls, values: Any) -> Any:
        if isinstance(values, dict) and values.get("data") is not None:
            values = {"data_source": DataSource.FILE.value, **values}
        return values

    @model_validator(mode="after")
    def _data_consistent(self) -> MeasureSettings:
        if self.data_source == DataSource.FILE and self.data is None:
            raise ValueError(
                "data_source 'file' needs data: {path: /abs/tokens.bin} (or --data PATH)"
            )
        if self.data is not None and self.data_source != DataSource.FILE:
            raise ValueError(
                f"data is given but data_source is {self.data_source.value!r}; drop "
                "data_source (data implies 'file') or drop data"
            )
        return self

    # The longest a compiled trial's first step (torch.compile's tracing, codegen and, in the
    # max-autotune modes, kernel autotuning) may take: past it the trial stops itself and
    # reports `compile_error` ("compile budget"), a property of the config under this budget,
    # never retried, instead of running into timeout_s and being retried as a timeout (two
    # timeouts of a max-autotune trial cost 2 x timeout_s). With a time budget the coordinator
    # lowers it to the study's time left (workers/compile_budget.py). None: no budget.
    compile_budget_s: float | None = Field(default=None, gt=0, le=86400)
    # The headroom check of a recommendation (autotuner/search/headroom.py): after the timed
    # repeats, one evaluation forward pass (model.eval(), torch.no_grad()) and a save of the
    # model and optimizer state dicts (serialized, not written to disk), so the result's
    # peak_*_with_eval_ckpt_gib show what a real run that evaluates and checkpoints needs.
    headroom_check: bool = False
    # Stop a search trial early (docs/measurement.md "Noise"): when its first timed repeat runs
    # below this many tokens/s, the worker stops after it and reports an ok result with
    # `stopped_early` set. The coordinator sets it for search trials only (the incumbent's
    # tokens/s less a margin far beyond the noise: search/early_stop.py); None: never stop.
    abandon_below_tokens_per_s: float | None = Field(default=None, gt=0)
    # Run the attention kernel once on a tiny tensor of the trial's head shape before building
    # (workers/support.py probe_attention: an unsupported kernel is refused in a fraction of a
    # second, not after minutes of build and compile). The coordinator turns it off where a
    # trial of the study already ran the same kernel at the same attention dtype: the probe
    # can only pass again, and on the H200 it cost an eager GPT-2 trial 0.18 s of its ~4.5 s
    # (bench/results/h200_session_20261204d).
    attention_probe: bool = True
