"""Named fakes for what this machine lacks (GPUs). Reused across test folders."""

from __future__ import annotations

import itertools
import math
import tempfile
import zlib
from pathlib import Path
from typing import Any

from autotuner.executors.base import Completed, Executor
from autotuner.executors.factory import DelayedExecutor
from autotuner.executors.replay import Landscape, ReplayExecutor
from autotuner.spec import FailureClass, Fingerprint, TrialConfig, TrialResult, TrialStatus

FAKE_GPU = Fingerprint(
    device_type="cuda",
    device_name="FakeGpu H200",
    device_count=1,
    compute_capability="9.0",
    memory_total_gib=80.0,
    driver="0",
    cuda="13.0",
    torch="2.13.0",
    python="3.11",
    hostname="fake",
)


def measured(tps: float, **extra: object) -> TrialResult:
    """An ok result as a fake GPU measures it: median `tps`, repeats within +-1%."""
    return TrialResult(
        status=TrialStatus.OK,
        tokens_per_s=tps,
        tokens_per_s_min=tps * 0.99,
        tokens_per_s_max=tps * 1.01,
        tokens_per_s_per_gpu=tps,
        **extra,
    )


def synthetic_landscape(
    knobs: dict[str, list[Any]], *, seed_best: dict[str, Any] | None = None
) -> Landscape:
    """A deterministic landscape over the grid of `knobs`, shaped like a real one.

    Throughput grows with micro-batch until memory runs out (OOM past 32 in fp32, 64 in bf16),
    bf16 beats fp32 by 1.8x, checkpointing costs 25%, the fused optimizer wins 3%; anything else
    varies by a few percent. Repeats have a 1% spread.
    """
    names = list(knobs)
    entries = []
    for values in itertools.product(*(knobs[n] for n in names)):
        p = dict(zip(names, values, strict=True))
        mb = int(p.get("micro_batch_size", 8))
        half = p.get("precision", "fp32") != "fp32"
        ckpt = p.get("checkpointing", "none") != "none"
        limit = (64 if half else 32) * (2 if ckpt else 1)
        if mb > limit:
            result = TrialResult.failure(
                FailureClass.OOM,
                "CUDA out of memory (synthetic)",
                required_mem_gib=80.0 * mb / limit,
                memory_limit_gib=80.0,
                wall_s=5.0,
            )
        else:
            tps = 10_000.0 * (mb / (mb + 8)) * (1.8 if half else 1.0) * (0.75 if ckpt else 1.0)
            if p.get("optimizer") == "adamw-fused":
                tps *= 1.03
            tps *= 1.0 + 0.002 * (zlib.crc32(str(sorted(p.items())).encode()) % 10) / 10
            result = measured(tps, peak_mem_gib=mb * 1.0, fingerprint=FAKE_GPU, wall_s=10.0)
        entries.append((p, result))
    return Landscape(entries)


# --------------------------------------------------------------------------- a physical fake

FAKE_H200 = Fingerprint(
    device_type="cuda",
    device_name="FakeGpu H200",
    device_count=1,
    compute_capability="9.0",
    memory_total_gib=139.8,
    driver="0",
    cuda="13.0",
    torch="2.13.0",
    python="3.11",
    hostname="fake",
)
# Older GPUs, for the rules of compute capability (no such card on the lent machines): the
# fake H200 with another name, capability and memory.
FAKE_A100 = FAKE_H200.model_copy(
    update={"device_name": "FakeGpu A100", "compute_capability": "8.0", "memory_total_gib": 79.2}
)
FAKE_V100 = FAKE_H200.model_copy(
    update={"device_name": "FakeGpu V100", "compute_capability": "7.0", "memory_total_gib": 31.7}
)
# How the "true" memory of the fake GPU differs from the cost model's uncalibrated estimate:
# the model must learn these from measured trials (that is what calibration is for).
TRUE_MEMORY_FACTORS = {
    "static": 1.1,
    "activations": 1.35,
    "activations_compiled": 0.9,
    "activations_compiled_fp8": 0.8,
    "scores": 1.2,
    "logits": 0.8,
    "logits_compiled": 0.7,
    "logits_fused": 1.1,
    "logits_cce": 1.1,
    "base": 3.0,
    "optimizer_step": 1.05,
    "graph_grads": 1.1,
}


def physical_landscape(
    model: Any,
    knobs: dict[str, list[Any]],
    *,
    fixed: dict[str, Any] | None = None,
    limit_gib: float = 139.8,
    fingerprint: Fingerprint = FAKE_H200,
) -> Landscape:
    """A deterministic landscape whose memory behaves like a real GPU's, for a real model spec.

    Peak memory is the cost model's component estimate times hidden per-component factors
    (TRUE_MEMORY_FACTORS) plus a little noise, so a calibrated cost model can learn it and an
    uncalibrated one is off by 10-35%; configs over `limit_gib` are `oom` (with the failing
    request as required_mem_gib, as the worker reports it). Configs the built-in rules call
    impossible are `unsupported`, as a worker would report them. Throughput: half precision
    1.8x fp32 (tf32 1.5x), flash/cudnn > efficient > flex > math, compile +12% (and 40 s of
    compile time), reduce-overhead +15%, checkpointing -25% (selective -10%), fused AdamW +2%,
    vocab padding to 64 +3%; micro-batch saturates; a 1% repeat spread.
    """
    from autotuner.executors.base import Target
    from autotuner.search.costmodel import estimate
    from autotuner.search.rules import incompatibility
    from autotuner.spec import Knobs

    target = Target.from_fingerprint(fingerprint)
    names = list(knobs)
    entries = []
    for values in itertools.product(*(knobs[n] for n in names)):
        p = dict(zip(names, values, strict=True))
        k = Knobs.model_validate({**(fixed or {}), **p})
        crc = zlib.crc32(str(sorted(p.items())).encode())
        reason = incompatibility(k, target, model)
        if reason:
            entries.append(
                (
                    p,
                    TrialResult.failure(
                        FailureClass.UNSUPPORTED,
                        reason,
                        wall_s=4.0,
                        fingerprint=fingerprint,
                        unsupported_knobs={
                            "attention": k.attention.value,
                            "precision": k.precision.value,
                        },
                    ),
                )
            )
            continue
        est = estimate(model, k, on_cuda=True)
        peak = sum(v * TRUE_MEMORY_FACTORS[c] for c, v in est.components.items())
        peak *= 1.0 + 0.02 * ((crc % 7) - 3) / 3
        need = peak * 1.04 + 0.6
        compile_s = 0.0 if k.compile_mode == "none" else 40.0
        if need > limit_gib:
            entries.append(
                (
                    p,
                    TrialResult.failure(
                        FailureClass.OOM,
                        "CUDA out of memory (fake)",
                        required_mem_gib=1.5,
                        memory_limit_gib=limit_gib,
                        wall_s=8.0 + compile_s,
                        fingerprint=fingerprint,
                    ),
                )
            )
            continue
        mb = k.micro_batch_size
        tps = 60_000.0 * mb / (mb + 6)
        tps *= {"fp32": 1.0, "tf32": 1.5}.get(k.precision.value, 1.8)
        tps *= {"flash": 1.0, "cudnn": 1.01, "efficient": 0.93, "flex": 0.9, "math": 0.7}[
            k.attention.value
        ]
        tps *= {"none": 1.0, "default": 1.12, "reduce-overhead": 1.15}.get(
            k.compile_mode.value, 1.13
        )
        tps *= {"none": 1.0, "selective": 0.9, "full": 0.75}[k.checkpointing.value]
        tps *= 1.02 if k.optimizer == "adamw-fused" else 1.0
        tps *= 1.03 if k.vocab_pad_multiple != 1 else 1.0
        tps *= 1.0 + 0.004 * ((crc % 5) - 2) / 2
        entries.append(
            (
                p,
                measured(
                    tps,
                    peak_mem_gib=peak,
                    peak_reserved_gib=peak * 1.04,
                    memory_limit_gib=limit_gib,
                    compile_s=compile_s,
                    fingerprint=fingerprint,
                    wall_s=15.0 + compile_s,
                ),
            )
        )
    return Landscape(entries)


# --------------------------------------------------------------------------- several GPUs


class FakeMultiGpuReplay(ReplayExecutor):
    """A ReplayExecutor for k-GPU trials: the landscape holds one-GPU results; a trial on k
    GPUs measures k x `scaling` of it (`num_ranks` k), keyed by the single-GPU knobs only, so
    a study's one-GPU reference trial finds its config too."""

    def __init__(self, *args: Any, scaling: float = 0.9, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scaling = scaling

    def _answer(self, config: TrialConfig) -> TrialResult:
        result = super()._answer(config)
        k = max(config.num_gpus, 1)
        if result.status != TrialStatus.OK or k == 1:
            return result
        tps = (result.tokens_per_s or 0.0) * k * self.scaling
        return result.model_copy(
            update={
                "tokens_per_s": tps,
                "tokens_per_s_min": tps * 0.99,
                "tokens_per_s_max": tps * 1.01,
                "tokens_per_s_per_gpu": tps / k,
                "num_ranks": k,
            }
        )


# --------------------------------------------------------------------------- loss parity


def parity_curve(steps: int, *, drift_rel: float = 0.0, jitter: float = 0.0) -> list[float]:
    """A falling loss curve (6 -> about 1.1 over 50 steps); `drift_rel` lifts it by up to that
    share at the last step (a recipe that learns worse), `jitter` adds +-that share of
    deterministic rounding-like wobble (a recipe that learns as well)."""
    out = []
    for i in range(steps):
        loss = 1.0 + 5.0 * math.exp(-i / 12)
        loss *= 1.0 + drift_rel * i / max(steps - 1, 1)
        loss *= 1.0 + jitter * ((i % 3) - 1)
        out.append(loss)
    return out


class FakeParityReplay(ReplayExecutor):
    """A ReplayExecutor that also answers loss-parity trials (`measure.parity_steps` set):
    every precision trains along the same falling curve (with a 0.1% wobble where it is not
    bf16/fp32 with fp32 AdamW moments and the unfused loss), except the precisions, optimizers
    or kernels in `drifting`,
    whose loss ends `drift_rel` higher: the provoked bad config the numerics check must catch.
    `parity` keeps the parity configs."""

    def __init__(
        self,
        *args: Any,
        drifting: tuple[str, ...] = (),
        drift_rel: float = 0.1,
        parity_wall_s: float = 20.0,
        **kw: Any,
    ) -> None:
        super().__init__(*args, **kw)
        self.drifting, self.drift_rel = set(drifting), drift_rel
        self.parity_wall_s = parity_wall_s
        self.parity: list[TrialConfig] = []

    def _answer(self, config: TrialConfig) -> TrialResult:
        steps = config.measure.parity_steps
        if steps is None:
            return super()._answer(config)
        self.parity.append(config)
        precision, optimizer = config.knobs.precision.value, config.knobs.optimizer.value
        kernels = config.knobs.kernels.value
        exact = precision in ("bf16", "fp32") and optimizer != "adamw-8bit" and kernels == "none"
        drift = self.drift_rel if {precision, optimizer, kernels} & self.drifting else 0.0
        curve = parity_curve(steps, drift_rel=drift, jitter=0.0 if exact else 0.001)
        if config.measure.headroom_check:
            # A headroom check that runs the candidate's parity steps first: the recorded
            # trial, with the curve its parity steps trained.
            return super()._answer(config).model_copy(update={"loss_curve": curve})
        return measured(
            1000.0,
            loss_curve=curve,
            loss_first=curve[0],
            loss_last=curve[-1],
            wall_s=self.parity_wall_s,
        )


class PacedExecutor(DelayedExecutor):
    """Wraps a replay executor so that each trial takes its recorded `wall_s` of real time:
    a study with a time budget runs against the clock as it would on the GPU, where a trial
    is minutes of compile and measurement."""

    def __init__(self, inner: Executor) -> None:
        super().__init__(inner, 0.0)

    def _delay_s(self, completed: Completed) -> float:
        return completed.result.wall_s or 0.0


# --------------------------------------------------------------------------- headroom check


class FakeHeadroomReplay(ReplayExecutor):
    """A ReplayExecutor that also answers headroom checks (`measure.headroom_check` set): the
    recorded result, with its peaks times `eval_factor` (by micro-batch; 1.05 where not given)
    as the peaks with an evaluation pass and a checkpoint save. `checks` keeps those configs."""

    def __init__(self, *args: Any, eval_factor: dict[int, float] | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.eval_factor = eval_factor or {}
        self.checks: list[TrialConfig] = []

    def _answer(self, config: TrialConfig) -> TrialResult:
        result = super()._answer(config)
        if not config.measure.headroom_check or result.status != TrialStatus.OK:
            return result
        self.checks.append(config)
        factor = self.eval_factor.get(config.knobs.micro_batch_size, 1.05)
        return result.model_copy(
            update={
                "peak_mem_with_eval_ckpt_gib": (result.peak_mem_gib or 0.0) * factor,
                "peak_reserved_with_eval_ckpt_gib": (result.peak_reserved_gib or 0.0) * factor,
            }
        )


# --------------------------------------------------------------------------- worker deaths


class FakeWorkerDeathReplay(ReplayExecutor):
    """A ReplayExecutor whose worker dies during the trials numbered in `die_on` (1-based, in
    submission order): those answer as an infra failure, which the coordinator retries once;
    every other trial gets its recorded result."""

    def __init__(self, *args: Any, die_on: set[int], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.die_on = die_on
        self._answered = 0

    def _answer(self, config: TrialConfig) -> TrialResult:
        self._answered += 1
        if self._answered in self.die_on:
            return TrialResult.failure(FailureClass.INFRA, "the Ray worker died (fake)")
        return super()._answer(config)


# --------------------------------------------------------------------------- time budget


def run_study_whose_checks_cannot_fit(db: Any, on_event: Any = None) -> tuple[str, Any]:
    """A 10-minute study on simulated time whose one config, compiled, takes 380 s: its
    headroom check (a warm re-run and an evaluation pass, about 350 s) would end more than the
    grace past the budget (search/end_time.py `checks_cut`). Returns (study id, clock)."""
    from autotuner.executors.replay import SimulatedClock
    from autotuner.search.space import parse_space
    from autotuner.spec import ModelSpec
    from autotuner.study.coordinator import StudyRunner, create_study
    from bench.replay_lib.simtime import RerunWalls

    compiled = measured(
        100.0,
        wall_s=380.0,
        compile_s=300.0,
        peak_mem_gib=10.0,
        memory_kind="cuda",
        memory_limit_gib=80.0,
    )
    landscape = Landscape([({"micro_batch_size": 8}, compiled)])
    space = parse_space(
        {
            "name": "one-compiled",
            "knobs": {"micro_batch_size": [8]},
            "fixed": {"precision": "fp32", "attention": "math", "compile_mode": "default"},
        }
    )
    model = ModelSpec.resolve({"preset": "tiny"})
    study_id = create_study(db, model=model, space=space, max_minutes=10)
    clock = SimulatedClock()
    executor = ReplayExecutor(
        landscape,
        ["micro_batch_size"],
        target=landscape.target(),
        clock=clock,
        rewall=RerunWalls(),
    )
    hooks = {"on_event": on_event} if on_event is not None else {}
    StudyRunner(db, study_id, executor, poll_s=0.0, clock=clock, **hooks).run()
    return study_id, clock


# --------------------------------------------------------------- a worker without a package

_UNINSTALL = '''\
"""Makes {names} uninstalled for this interpreter (tests/fakes.py: without_packages)."""
import importlib.abc
import sys

_GONE = {names!r}


class _Uninstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _GONE:
            # What the import system raises for a package that is not installed.
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _Uninstalled())
'''


def without_packages(folder: Any, *names: str) -> str:
    """A folder whose `sitecustomize.py` makes `names` not installed for every interpreter
    started with the folder on its PYTHONPATH (returned): `import transformers` raises
    ModuleNotFoundError there, as on a worker where it was never installed. The package stays
    installed for every other process of the machine; nothing of ours is mocked. Only for
    environments with no sitecustomize of their own (the first one on the path wins)."""
    from pathlib import Path

    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    (path / "sitecustomize.py").write_text(_UNINSTALL.format(names=tuple(names)))
    return str(path)


# --------------------------------------------------------------------------- a Ray cluster

FAKE_TRIAL_S_ENV = "AUTOTUNER_FAKE_TRIAL_S"  # how long each FakeTrialRayExecutor trial takes


def fake_trial_marker(study_id: str | None, number: int | None) -> Path:
    """The file a FakeTrialRayExecutor trial writes when it starts (all nodes share /tmp)."""
    return Path(tempfile.gettempdir()) / f"autotuner-fake-trial-{study_id}-{number}"


def fake_trial_log(study_id: str | None) -> Path:
    """One JSON line per FakeTrialRayExecutor trial of the study that ended (not one killed
    with its Ray worker): its number, the GPU ids Ray gave its task, CUDA_VISIBLE_DEVICES as
    the task saw it, its start and end (time.time()) and how it ended."""
    return Path(tempfile.gettempdir()) / f"autotuner-fake-trials-{study_id}.jsonl"


def fake_trial_fault(study_id: str | None, number: int | None) -> Path:
    """Write "raise" (the Ray task raises) or "crash" (the trial's process died: a `crash`
    result) into this file before trial `number` runs, and it fails so, at once."""
    return Path(tempfile.gettempdir()) / f"autotuner-fake-fault-{study_id}-{number}"


def _fake_trial_task(config_json: str) -> tuple[str, str]:
    """Runs on a Ray worker in a trial's place: says it started, takes $AUTOTUNER_FAKE_TRIAL_S
    (the cluster's environment, 1 s by default), and measures what a fake GPU would, if Ray
    gave the task one: on a node without, it measures the CPU, 100x slower, as a trial that
    lost its GPU reservation would. Logs what it saw (fake_trial_log); fails as told
    (fake_trial_fault)."""
    import json
    import os
    import socket
    import time

    import ray

    config = TrialConfig.model_validate_json(config_json)
    start = time.time()
    fake_trial_marker(config.study_id, config.trial_number).touch()
    gpus = ray.get_gpu_ids()
    fault_file = fake_trial_fault(config.study_id, config.trial_number)
    fault = fault_file.read_text().strip() if fault_file.exists() else None
    if fault is None:
        time.sleep(float(os.environ.get(FAKE_TRIAL_S_ENV, "1")))
    record = {
        "number": config.trial_number,
        "gpus": [str(g) for g in gpus],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "start": start,
        "end": time.time(),
        "outcome": fault or "ok",
    }
    with open(fake_trial_log(config.study_id), "a") as log:  # one short append per trial
        log.write(json.dumps(record) + "\n")
    if fault == "raise":
        raise RuntimeError(f"trial #{config.trial_number} raised (fake)")
    node = ray.get_runtime_context().get_node_id()[:8]
    worker = f"{socket.gethostname()}:{os.getpid()}@{node} gpus={gpus}"
    if fault == "crash":
        result = TrialResult.failure(FailureClass.CRASH, "killed by SIGKILL (fake)", wall_s=0.0)
        return result.model_dump_json(), worker
    mb = config.knobs.micro_batch_size
    tps = 10_000.0 * mb / (mb + 8) * (1.0 if gpus else 0.01)
    fingerprint = FAKE_GPU if gpus else FAKE_GPU.model_copy(update={"device_type": "cpu"})
    result = measured(tps, fingerprint=fingerprint, wall_s=1.0)
    return result.model_dump_json(), worker


def fake_ray_executor(address: str) -> Any:
    """The real RayExecutor (its GPU reservations, placement, failure handling, connection
    health and reconnects) on a Ray test cluster of logical GPUs, with each trial's body a
    fake measurement (`_fake_trial_task`) and the GPU probe's answer given (FakeGpu H200):
    what a cluster without CUDA can test of a GPU study."""
    from autotuner.executors.ray_executor import RayExecutor

    class FakeTrialRayExecutor(RayExecutor):
        def __init__(self, address: str) -> None:
            super().__init__(address)
            self._task = self._ray.remote(max_calls=0, max_retries=0)(_fake_trial_task)
            self._gpu_info = {"name": "FakeGpu H200", "compute_capability": [9, 0]}
            self._gpu_info["memory_gib"] = 80.0

    return FakeTrialRayExecutor(address)
