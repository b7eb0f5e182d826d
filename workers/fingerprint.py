"""What a result was measured on. Results are compared only within one fingerprint key."""

from __future__ import annotations

import contextlib
import platform
import socket

import torch

from autotuner.spec import Fingerprint

GIB = 1024**3


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version
    except Exception:  # no NVML: the driver version is simply unknown
        return None


def collect(device: torch.device) -> Fingerprint:
    common = dict(
        torch=torch.__version__,
        python=platform.python_version(),
        hostname=socket.gethostname(),
        cpu=_cpu_model(),
    )
    if device.type != "cuda":
        return Fingerprint(
            device_type="cpu",
            device_name=_cpu_model() or "cpu",
            device_count=1,
            **common,
        )
    props = torch.cuda.get_device_properties(device)
    nccl = None
    with contextlib.suppress(Exception):  # a torch build without NCCL
        nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
    return Fingerprint(
        device_type="cuda",
        device_name=props.name,
        device_count=torch.cuda.device_count(),
        compute_capability=f"{props.major}.{props.minor}",
        memory_total_gib=round(props.total_memory / GIB, 2),
        driver=_driver(),
        cuda=torch.version.cuda,
        nccl=nccl,
        # Not detected yet: a one-GPU trial does not depend on it.
        interconnect=None,
        **common,
    )
