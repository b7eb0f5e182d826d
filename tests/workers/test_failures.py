"""Exceptions map to failure classes by type, and OOM is found anywhere in the cause chain."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo.exc as dynamo_exc

from autotuner.spec import FailureClass
from workers.errors import NumericsError, UnsupportedConfig
from workers.failures import classify


def _wrapped(inner: Exception) -> Exception:
    try:
        try:
            raise inner
        except Exception as e:
            raise dynamo_exc.BackendCompilerFailed(lambda *a: None, e, None) from e
    except Exception as outer:
        return outer


@pytest.mark.parametrize(
    "exc, cls, required",
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB."), "oom", 2.0),
        (MemoryError(), "oom", None),
        (
            RuntimeError(
                "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: "
                "you tried to allocate 1073741824 bytes."
            ),
            "oom",
            1.0,
        ),
        (_wrapped(torch.OutOfMemoryError("Tried to allocate 512.00 MiB")), "oom", 0.5),
        (_wrapped(ValueError("bad lowering")), "compile_error", None),
        (dynamo_exc.TorchRuntimeError("fake tensor failed"), "compile_error", None),
        (NumericsError("loss is nan"), "numerics", None),
        (  # as the H200 raised it (Llama 1B, fp8, reduce-overhead, accumulation 4)
            RuntimeError(
                "Error: accessing tensor output of CUDAGraphs that has been overwritten by a "
                "subsequent run. Stack trace: ..."
            ),
            "compile_error",
            None,
        ),
        (ValueError("some bug"), "crash", None),
        (RuntimeError("CUDA error: an illegal memory access"), "crash", None),
    ],
)
def test_classify(exc, cls, required):
    failure_class, message, extra = classify(exc)
    assert failure_class == FailureClass(cls)
    assert message
    assert extra.get("required_mem_gib") == required


def test_unsupported_keeps_the_blamed_knobs():
    cls, message, extra = classify(UnsupportedConfig("use bf16", {"precision": "tf32"}))
    assert (cls, message, extra) == (
        FailureClass.UNSUPPORTED,
        "use bf16",
        {"unsupported_knobs": {"precision": "tf32"}},
    )
