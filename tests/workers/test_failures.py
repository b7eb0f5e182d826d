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


_GLOO_PEER = """
import os, signal, sys
import torch, torch.distributed as dist
rank, port = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
t = torch.ones(8)
dist.all_reduce(t)
if rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)  # the peer dies between two collectives
try:
    dist.all_reduce(t)
except Exception as exc:
    print(repr(exc))
"""


def test_a_collective_whose_peer_died_is_a_lost_peer_not_a_crash_of_this_rank() -> None:
    """Two real gloo ranks; rank 1 dies. What rank 0's next collective raises is a knock-on
    (workers.trial raises PeerFailed for it: the dead rank's launcher reports the trial). An
    ordinary error is not."""
    import socket
    import subprocess
    import sys

    from workers.failures import lost_peer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", _GLOO_PEER, str(r), port], stdout=subprocess.PIPE, text=True
        )
        for r in (0, 1)
    ]
    out = ranks[0].communicate(timeout=120)[0]
    ranks[1].wait(timeout=30)
    assert out.startswith("RuntimeError("), out
    assert lost_peer(RuntimeError(out))
    try:
        try:
            raise RuntimeError(out)
        except RuntimeError as inner:
            raise ValueError("wrapped") from inner
    except ValueError as outer:
        assert lost_peer(outer)  # anywhere in the cause chain
    assert not lost_peer(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert classify(RuntimeError(out))[0] == FailureClass.CRASH  # alone it classifies as before


def test_a_gpu_trial_on_a_worker_whose_torch_sees_no_gpu_is_an_environment_failure() -> None:
    """measure.device cuda where torch has no GPU (here: this machine's CPU build of torch):
    not a retryable infra failure of one trial, the worker's environment, with the fix."""
    from autotuner.spec import Device, Knobs, ModelSpec, TrialConfig
    from workers.trial import run_trial

    from .conftest import FAST

    config = TrialConfig(
        model=ModelSpec.resolve({"preset": "tiny"}),
        knobs=Knobs(precision="fp32", attention="math"),
        measure=FAST.model_copy(update={"device": Device.CUDA}),
        num_gpus=1,
    )
    result = run_trial(config)
    assert result is not None and result.failure_class == FailureClass.ENVIRONMENT
    message = result.error_message or ""
    assert message.startswith("the study asked for a GPU but "), message
    if torch.version.cuda is None:
        assert "CPU-only build" in message and "install a CUDA build of torch" in message
