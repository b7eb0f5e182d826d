"""Up-front support checks: a config with no kernel on this worker is `unsupported`, with a
remedy, before anything is built (minutes of model build and compile saved, and no guessing from
an exception's text later).

Two layers: `static_check` encodes the known rules (dtype/device/capability), and
`probe_attention` asks the real SDPA dispatcher with a tiny forward+backward of the trial's
head shape and dtype, which catches what the rules do not know (e.g. a head_dim a kernel lacks).
"""

from __future__ import annotations

import importlib.util

import torch

from autotuner.spec import Attention, CompileMode, Kernels, Optimizer, Precision, TrialConfig
from workers.errors import EnvironmentProblem, UnsupportedConfig
from workers.precision import autocast_dtype

_CUDA_ONLY_SDPA = (Attention.EFFICIENT, Attention.CUDNN)
_HALF_ONLY_SDPA = (Attention.FLASH, Attention.CUDNN)
_CUDAGRAPH_MODES = (CompileMode.REDUCE_OVERHEAD, CompileMode.MAX_AUTOTUNE)


def static_check(
    config: TrialConfig, device: torch.device, ranks: int = 1
) -> UnsupportedConfig | EnvironmentProblem | None:
    """Why this worker cannot run the config (message with a remedy + the knobs to blame).

    `ranks`: the processes this trial runs in (the parallel knobs are checked in
    workers/distributed.py).
    """
    k = config.knobs
    precision = {"precision": k.precision.value}
    attention = {"attention": k.attention.value}
    if k.optimizer == Optimizer.ADAMW_8BIT and importlib.util.find_spec("torchao") is None:
        # The space asked for it and this worker lacks the package: its environment, not the
        # config (the study stops with the remedy rather than tune without what it asked for).
        return EnvironmentProblem(
            "the worker cannot import torchao, which optimizer adamw-8bit (torchao's "
            "AdamW8bit) needs: pip install torchao in the workers' Python environment, or "
            "drop adamw-8bit from the space's optimizer values"
        )
    if k.kernels != Kernels.NONE:
        kernels = {"kernels": k.kernels.value}
        if device.type != "cuda":
            return UnsupportedConfig(
                f"kernels {k.kernels.value!r} are Liger-Kernel's Triton kernels, which need a "
                "CUDA GPU; on the CPU use kernels 'none'",
                kernels,
            )
        if importlib.util.find_spec("liger_kernel") is None:
            return EnvironmentProblem(
                f"the worker cannot import liger_kernel, which kernels {k.kernels.value!r} "
                "need: pip install liger-kernel in the workers' Python environment (the "
                "`kernels` extra), or drop fused-ce and liger from the space's kernels values"
            )
    if config.num_gpus > 1 and ranks != config.num_gpus:
        return UnsupportedConfig(
            f"num_gpus={config.num_gpus} runs one process per GPU but this trial has {ranks}: "
            "start it with workers.launch.run_trial_process, which launches the ranks"
        )
    if device.type == "cpu":
        if k.precision == Precision.TF32:
            return UnsupportedConfig(
                "tf32 is a CUDA tensor-core mode; on the CPU use fp32 or bf16", precision
            )
        if k.precision.is_fp8:
            return UnsupportedConfig(
                f"{k.precision.value} needs an NVIDIA GPU with compute capability >= 8.9 "
                "(Ada/Hopper) and torchao; on the CPU use bf16",
                precision,
            )
        if k.compile_mode in _CUDAGRAPH_MODES:
            return UnsupportedConfig(
                f"compile mode {k.compile_mode.value!r} captures CUDA graphs and needs a CUDA "
                "device; on the CPU use 'default' or 'max-autotune-no-cudagraphs'",
                {"compile_mode": k.compile_mode.value},
            )
        if k.attention in _CUDA_ONLY_SDPA:
            return UnsupportedConfig(
                f"the {k.attention.value!r} SDPA backend exists only on CUDA; on the CPU use "
                "'math' or 'flash' (PyTorch's CPU flash kernel)",
                attention,
            )
        if k.attention == Attention.FLEX:
            return UnsupportedConfig(
                f"FlexAttention has no CPU backward in torch {torch.__version__}; on the CPU "
                "use 'math' or 'flash'",
                attention,
            )
        return None
    major, minor = torch.cuda.get_device_capability(device)
    if k.attention in _HALF_ONLY_SDPA and not k.precision.is_half:
        return UnsupportedConfig(
            f"{k.attention.value} attention needs fp16 or bf16; remove {k.attention.value!r} or "
            f"drop {k.precision.value} from the space",
            {**attention, **precision},
        )
    if k.precision.is_fp8:
        if (major, minor) < (8, 9):
            return UnsupportedConfig(
                f"{k.precision.value} needs compute capability >= 8.9 (Ada/Hopper); this GPU is "
                f"{major}.{minor}: use bf16",
                precision,
            )
        if importlib.util.find_spec("torchao") is None:
            return EnvironmentProblem(
                f"the worker cannot import torchao, which {k.precision.value} training needs: "
                "pip install torchao in the workers' Python environment, or drop "
                f"{k.precision.value} from the space's precision values"
            )
    return None


def probe_attention(config: TrialConfig, device: torch.device) -> UnsupportedConfig | None:
    """Run the chosen SDPA backend once on a tiny tensor of the trial's head shape and dtype."""
    from workers.models.attention import attend

    k = config.knobs
    if k.attention == Attention.FLEX:
        return None  # compiled on CUDA: a probe would cost a compile; the static rules cover it
    dtype = autocast_dtype(k.precision) or torch.float32
    spec = config.model
    shape = (1, spec.n_head, min(spec.seq_len, 128), spec.head_dim)
    q = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
    try:
        attend(q, q, q, k.attention).sum().backward()
    except (RuntimeError, NotImplementedError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return UnsupportedConfig(
            f"no {k.attention.value!r} attention kernel for {dtype} with head_dim "
            f"{spec.head_dim} on {device.type}: {first_line[:300]}; pick another attention "
            "backend",
            {"attention": k.attention.value, "precision": k.precision.value},
        )
    return None
