"""Map an exception raised inside a trial to a failure class, from its type (never from
grepping the message for "error").

Order matters: an OOM inside torch.compile (autotuning allocates) arrives wrapped in a dynamo
exception, so the whole cause chain is searched for an OOM before the compile classes.
"""

from __future__ import annotations

import functools
import re
import traceback

from autotuner.datafiles import DataError
from autotuner.spec import FailureClass, clip
from workers.errors import EnvironmentProblem, NumericsError, UnsupportedConfig

GIB = 1024**3


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


@functools.cache
def compile_error_types() -> tuple[type, ...]:
    """torch.compile's exception types that this torch has (dynamo and inductor)."""
    types: list[type] = []
    try:
        import torch._dynamo.exc as dynamo_exc

        for name in (
            "BackendCompilerFailed",
            "TorchRuntimeError",
            "InternalTorchDynamoError",
            "Unsupported",
            "UserError",
        ):
            if hasattr(dynamo_exc, name):
                types.append(getattr(dynamo_exc, name))
    except ImportError:
        pass
    try:
        import torch._inductor.exc as inductor_exc

        for name in ("InductorError", "LoweringException", "CppCompileError", "CUDACompileError"):
            if hasattr(inductor_exc, name):
                types.append(getattr(inductor_exc, name))
    except ImportError:
        pass
    return tuple(types)


def _is_cpu_allocator_oom(exc: BaseException) -> bool:
    # torch raises no OutOfMemoryError for the CPU: its allocator fails a c10 enforce, which
    # reaches Python as a plain RuntimeError. The allocator's own fixed phrase is the only
    # signal it gives, so this one check reads the message.
    return type(exc) is RuntimeError and "DefaultCPUAllocator: can't allocate memory" in str(exc)


_REQUEST = re.compile(r"(?:Tried to allocate|tried to allocate) ([\d.]+) ?(GiB|MiB|KiB|bytes|B)\b")
_UNITS = {"GiB": GIB, "MiB": 1024**2, "KiB": 1024, "bytes": 1, "B": 1}


# CUDA-graph trees (compile mode reduce-overhead) refuse a step that reads a graph output a
# later replay overwrote. It is a fixed phrase of torch/_inductor/cudagraph_trees.py, raised as
# a plain RuntimeError from the autograd engine: the only signal of a limit of this config under
# CUDA graphs (seen on the H200: Llama 1B, fp8, accumulation 4), not a crash to retry.
_CUDAGRAPH_OVERWRITTEN = "accessing tensor output of CUDAGraphs that has been overwritten"


def _is_cudagraph_overwrite(exc: BaseException) -> bool:
    return type(exc) is RuntimeError and _CUDAGRAPH_OVERWRITTEN in str(exc)


def _requested_gib(exc: BaseException) -> float | None:
    # torch.OutOfMemoryError carries no structured size: the failing request appears only in
    # its message ("Tried to allocate 2.00 GiB" / "you tried to allocate N bytes"), so it is
    # parsed from there; None when the message has no such phrase.
    m = _REQUEST.search(str(exc))
    return None if m is None else float(m.group(1)) * _UNITS[m.group(2)] / GIB


def _summary(exc: BaseException, limit: int = 1500) -> str:
    return clip(f"{type(exc).__name__}: {exc}".strip(), limit)


# What a collective raises on a rank whose peer process has died: gloo's closed socket (seen on
# this project's CPU: "Read error [...]: Connection reset by peer") and torch's DistBackendError
# for NCCL's remote error ("remote process exited or there was a network error ... ncclRemoteError:
# A call failed possibly due to a network error or a remote process exiting prematurely", as
# reported in NVIDIA/nccl issues 934 and 2076; not yet seen on this project's GPUs). In a
# multi-rank trial it is a knock-on of the peer's failure, which the peer (or its launcher)
# reports: this rank stops as PeerFailed does.
LOST_PEER_MESSAGES = (
    "Connection reset by peer",
    "Connection closed by peer",
    "remote process exited",
    "ncclRemoteError",
)


def lost_peer(exc: BaseException) -> bool:
    """Whether `exc` is a collective's error for a peer that is gone (LOST_PEER_MESSAGES)."""
    return any(m in str(e) for e in _chain(exc) for m in LOST_PEER_MESSAGES)


def classify(exc: BaseException) -> tuple[FailureClass, str, dict]:
    """(failure class, message, extra result fields) for an exception raised by a trial."""
    import torch

    for e in _chain(exc):
        if isinstance(e, torch.OutOfMemoryError | MemoryError) or _is_cpu_allocator_oom(e):
            return (
                FailureClass.OOM,
                "out of memory: " + _summary(e, 600),
                {"required_mem_gib": _requested_gib(e)},
            )
    if isinstance(exc, EnvironmentProblem):
        return FailureClass.ENVIRONMENT, str(exc), {}
    if isinstance(exc, ImportError):
        # Raised by the trial's own imports (a package torch or the model imports lazily):
        # this worker lacks it, whatever the config. One wrapped by torch.compile stays a
        # compile error below (inductor's optional imports belong to the compile mode).
        package = (exc.name or "").split(".")[0] or "a module"
        return (
            FailureClass.ENVIRONMENT,
            f"the worker cannot import {package} ({_summary(exc, 300)}): install it in the "
            "workers' Python environment",
            {},
        )
    if isinstance(exc, UnsupportedConfig):
        return FailureClass.UNSUPPORTED, str(exc), {"unsupported_knobs": exc.knobs}
    if isinstance(exc, NumericsError):
        return FailureClass.NUMERICS, str(exc), {}
    if isinstance(exc, DataError):  # the data is missing or different on this worker
        return FailureClass.INFRA, str(exc), {}
    compile_types = compile_error_types()
    if compile_types and any(isinstance(e, compile_types) for e in _chain(exc)):
        return FailureClass.COMPILE_ERROR, "torch.compile failed: " + _summary(exc), {}
    if any(_is_cudagraph_overwrite(e) for e in _chain(exc)):
        return (
            FailureClass.COMPILE_ERROR,
            "CUDA graphs (compile mode reduce-overhead) cannot run this config: "
            + _summary(exc, 600),
            {},
        )
    # Anything else is a bug or a broken device, not a property of the config: report it as a
    # crash with where it happened, so a person looks at it.
    tb = "".join(traceback.format_exception(exc, limit=-6))
    return FailureClass.CRASH, f"unexpected {_summary(exc, 800)}\n{tb[-2500:]}", {}
