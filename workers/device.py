"""What the device a trial runs on makes of its config: the knobs whose value cannot change what
runs there (reported in the result's notes), and, where the study asked for a GPU torch does not
see, why not, in torch's words where it has them.
"""

from __future__ import annotations

import os

from autotuner.spec import DataSource, TrialConfig

_DDP_ONLY = ["ddp_bucket_cap_mb", "ddp_grad_as_bucket_view", "ddp_static_graph", "grad_compression"]


_FSDP_ONLY = ["fsdp_reduce_dtype"]


_NCCL = ["nccl_algo", "nccl_proto", "nccl_min_channels", "nccl_max_channels", "nccl_buffsize"]


def inactive_knobs(config: TrialConfig, device_type: str) -> list[str]:
    """Knobs whose value cannot change what this trial runs (reported in the result's notes)."""
    k, off = config.knobs, []
    if config.measure.data_source == DataSource.SYNTHETIC:
        off += ["loader_workers", "pin_memory", "prefetch_factor"]
    else:
        if k.loader_workers == 0:
            off.append("prefetch_factor")
        if device_type != "cuda":
            off.append("pin_memory")
    if device_type != "cuda":
        off.append("allocator")  # the CUDA caching allocator's mode
    if config.num_gpus <= 1:
        return off + _NCCL + ["parallel"] + _DDP_ONLY + _FSDP_ONLY
    if device_type != "cuda":
        off += _NCCL  # gloo on the CPU
    off += _FSDP_ONLY if k.parallel == "ddp" else _DDP_ONLY
    return off


def no_cuda_reason() -> str:
    """Why torch sees no GPU here, in torch's words where it has them (a driver too old for
    this torch's CUDA, no driver at all), and what to do about it."""
    import torch

    if torch.version.cuda is None:
        return (
            f"this worker's torch {torch.__version__} is a CPU-only build: install a CUDA "
            "build of torch on the workers (make setup does where nvidia-smi works)"
        )
    try:
        torch.cuda.init()  # raises with the driver's reason where there is one
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return (
            f"CUDA does not start on this worker ({first}); torch {torch.__version__} was "
            f"built for CUDA {torch.version.cuda}: match the driver and torch's CUDA build"
        )
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (
        f"this worker sees no CUDA device (CUDA_VISIBLE_DEVICES={visible!r}): check nvidia-smi "
        "on the worker, or submit the study with --space cpu-demo to run on the CPU"
    )
