"""Up-front support checks: a config with no kernel on this worker is `unsupported`, with a
remedy, before anything is built (minutes of model build and compile saved, and no guessing from
an exception's text later).

Two layers: `static_check` reads the known rules (dtype/device/capability/shape) from the table
the search screens its proposals with (autotuner/spec/support_rules.py), so a config the search
would launch is one this worker runs; `probe_attention` asks the real SDPA dispatcher with a
tiny forward+backward of the trial's head shape and dtype, which catches what the rules do not
know (e.g. a head_dim a kernel lacks). What only the worker can know stays here: its device and
its compute capability (from torch), the packages it can import, and how the trial was launched.
"""

from __future__ import annotations

import importlib.util

import torch

from autotuner.spec import (
    Attention,
    Hardware,
    RuleKind,
    TrialConfig,
    packages_needed,
    support_verdicts,
)
from workers.errors import EnvironmentProblem, UnsupportedConfig
from workers.precision import autocast_dtype


def hardware_of(device: torch.device) -> Hardware:
    """The device as the shared rules take it: its type, and a GPU's compute capability."""
    if device.type != "cuda":
        return Hardware(device.type)
    return Hardware("cuda", torch.cuda.get_device_capability(device))


def static_check(
    config: TrialConfig, device: torch.device, ranks: int = 1
) -> UnsupportedConfig | EnvironmentProblem | None:
    """Why this worker cannot run the config (message with a remedy + the knobs to blame).

    `ranks`: the processes this trial runs in (the parallel knobs are checked in
    workers/distributed.py).
    """
    return check_on(config, hardware_of(device), ranks)


def check_on(
    config: TrialConfig,
    hardware: Hardware,
    ranks: int = 1,
    packages: frozenset[str] | None = None,
) -> UnsupportedConfig | EnvironmentProblem | None:
    """`static_check` on a described worker: its hardware, and the packages it can import
    (None: the ones this process can). A GPU's rules can be checked where there is none."""
    if config.num_gpus > 1 and ranks != config.num_gpus:
        return UnsupportedConfig(
            f"num_gpus={config.num_gpus} runs one process per GPU but this trial has {ranks}: "
            "start it with workers.launch.run_trial_process, which launches the ranks"
        )
    k = config.knobs
    if packages is None:
        packages = importable(packages_needed(k))
    for verdict in support_verdicts(k, hardware, model=config.model, packages=packages):
        if verdict.kind == RuleKind.CANNOT_RUN:
            return UnsupportedConfig(verdict.message, verdict.knobs)
        if verdict.kind == RuleKind.NEEDS_PACKAGE:
            # The space asked for it and this worker lacks the package: its environment, not
            # the config (the study stops with the remedy rather than tune without it).
            return EnvironmentProblem(verdict.message)
    # What is left is not worth a trial to the search, but runs: the worker measures it.
    return None


def importable(packages: set[str]) -> frozenset[str]:
    """Those of the packages this worker can import (found, not imported: torchao and
    liger-kernel take seconds to import, and only the trials that use them should pay)."""
    return frozenset(p for p in packages if importlib.util.find_spec(p) is not None)


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
