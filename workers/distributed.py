"""Inside one rank of a multi-GPU trial: the process group, the model's parallel wrapper, and the
collectives the timing protocol needs.

workers/launch_ranks.py starts one `python -m workers.trial` per rank with RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (and the NCCL variables, before torch is imported);
`Group.start` reads them. Every rank runs the same protocol; the collectives here keep them in
step, so no rank decides alone to stop, measure one more step, or wait in a collective forever:

- `agree(failure)` after the support checks and after the build: an all-reduce of a failure flag.
  A rank that failed raises its own error (and reports it); the others raise PeerFailed (and
  report nothing: the launcher takes the first rank's failure).
- `slowest(seconds)` after each timed step/repeat: every rank sees the same (slowest) time, so
  all make the same warm-up and steps-per-repeat decisions, and a repeat's time is the slowest
  rank's (docs/measurement.md).
- `mean(loss)`: the loss averaged over ranks, so a NaN on one rank fails every rank alike.

A failure inside a step cannot be agreed on (the healthy ranks wait in the step's gradient
collectives): the failing rank reports and exits, and the launcher kills the rest at once.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn

from autotuner.spec import (
    CompileMode,
    CompileScope,
    Knobs,
    RuleKind,
    TrialConfig,
    parallel_verdicts,
)
from workers.errors import PeerFailed, UnsupportedConfig
from workers.process import LIMIT_ENV

PG_TIMEOUT_FRACTION = 0.8
POWERSGD_RANK = 1  # low-rank approximation rank: the most compression PowerSGD offers
_FSDP = ("fsdp2", "fsdp2-no-reshard")
_NCCL_KNOBS = ("nccl_algo", "nccl_proto", "nccl_min_channels", "nccl_max_channels", "nccl_buffsize")


def nccl_knobs(k: Knobs) -> dict[str, object]:
    """The NCCL knobs this trial sets (the ones to blame when NCCL refuses to start)."""
    defaults = Knobs()
    return {n: getattr(k, n) for n in _NCCL_KNOBS if getattr(k, n) != getattr(defaults, n)}


def check(config: TrialConfig, device: torch.device) -> UnsupportedConfig | None:
    """Combinations of the parallel knobs this worker cannot run, with the fix: the shared
    table's (autotuner/spec/support_rules.py, which says why each is refused)."""
    for verdict in parallel_verdicts(config.knobs, device.type):
        if verdict.kind == RuleKind.CANNOT_RUN:
            return UnsupportedConfig(verdict.message, verdict.knobs)
    return None


def _blocks(model: nn.Module, n_layer: int) -> nn.ModuleList | None:
    """The model's stack of transformer blocks (GPT `blocks`, Llama `layers`, HF's own)."""
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == n_layer:
            return module
    return None


@dataclass
class Group:
    """This rank's view of the trial's process group."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    timeout_s: float
    last_progress: float = 0.0  # monotonic time of the last collective that completed

    @classmethod
    def start(cls, config: TrialConfig, device: torch.device) -> Group:
        """Join the process group (nccl on CUDA, gloo on the CPU) and try its collectives once.

        The group's timeout is shorter than the trial's limit so that a rank stuck waiting on a
        hung peer fails with a timeout message before the launcher has to kill it blind.
        """
        limit = float(os.environ.get(LIMIT_ENV, config.measure.timeout_s))
        group = cls(
            rank=int(os.environ["RANK"]),
            local_rank=int(os.environ["LOCAL_RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            device=device,
            timeout_s=max(5.0, PG_TIMEOUT_FRACTION * limit),
        )
        cuda = device.type == "cuda"
        if cuda:
            # The rank's current device: FSDP2 builds its default mesh and all-gather buffers
            # on it (left at cuda:0, rank 1's collectives ran on the wrong GPU: H200 x2 run).
            torch.cuda.set_device(device)
        try:
            # device_id binds NCCL to this rank's GPU and creates its communicator now, so a
            # rejected NCCL setting fails here, classified, and not inside the first backward.
            dist.init_process_group(
                "nccl" if cuda else "gloo",
                timeout=datetime.timedelta(seconds=group.timeout_s),
                device_id=device if cuda else None,
            )
            group._probe(config.knobs.parallel)
        except Exception as exc:
            blamed = nccl_knobs(config.knobs) if cuda else {}
            if not blamed:
                raise
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise UnsupportedConfig(
                f"NCCL refused its first collectives with {blamed}: {first}; leave these NCCL "
                "settings at 'default' (or drop the values from the space)",
                blamed,
            ) from exc
        group.last_progress = time.monotonic()
        return group

    def _probe(self, parallel: str) -> None:
        # The collectives the wrapper will use, once, on small tensors: NCCL picks an algorithm
        # and protocol per collective, so NCCL_ALGO/NCCL_PROTO may be valid for one and not
        # another (Tree exists only for all-reduce).
        x = torch.ones(4096, device=self.device)
        dist.all_reduce(x)
        if parallel in _FSDP:
            full = torch.empty(4096 * self.world_size, device=self.device)
            # *_single: torch 2.13's names (the *_tensor spellings are deprecated there).
            all_gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
            reduce_scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
            all_gather(full, x)
            reduce_scatter(x, full)
        else:
            dist.broadcast(x, src=0)
        self._sync()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _all_reduce(self, values: list[float], op) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=op)
        self.last_progress = time.monotonic()
        return t.tolist()

    # --- agreement and the timing protocol's collectives

    def agree(self, failure: BaseException | None) -> None:
        """Raise if any rank failed: this rank's own error, else PeerFailed."""
        (flag,) = self._all_reduce([0.0 if failure is None else 1.0], dist.ReduceOp.MAX)
        if failure is not None:
            raise failure
        if flag:
            raise PeerFailed("another rank failed before training; it reports the failure")

    def edge(self) -> None:
        """A repeat edge: this rank's queued work is done and every rank has arrived."""
        self._sync()
        self._all_reduce([0.0], dist.ReduceOp.SUM)
        self._sync()

    def slowest(self, seconds: float) -> float:
        return self._all_reduce([seconds], dist.ReduceOp.MAX)[0]

    def mean(self, loss: torch.Tensor) -> float:
        return self._all_reduce([float(loss)], dist.ReduceOp.SUM)[0] / self.world_size

    def largest(self, values: list[float | None]) -> list[float | None]:
        present = self._all_reduce([-1.0 if v is None else v for v in values], dist.ReduceOp.MAX)
        return [None if v < 0 else v for v in present]

    def stalled(self) -> bool:
        """Whether this rank waited a whole process-group timeout since the last collective."""
        return time.monotonic() - self.last_progress >= self.timeout_s * 0.95


def parallelize(
    model: nn.Module,
    config: TrialConfig,
    group: Group,
    compile_fn: Callable,
    compiled_regions: Callable[[str], None],
) -> tuple[nn.Module, Callable[[bool], contextlib.AbstractContextManager]]:
    """Wrap the built model by the `parallel` knob (compiling as it goes; `compiled_regions`
    is told the regions where FSDP2 compiles per block whatever the scope).

    Returns (the module to call, grad_sync): `with grad_sync(last_micro_step):` around each
    micro-step's forward and backward skips the gradient collectives on all but the last.
    """
    k = config.knobs
    if k.parallel == "ddp":
        return _ddp(model, k, group, compile_fn)
    return _fsdp2(model, config, compile_fn, compiled_regions)


def _ddp(model, k: Knobs, group: Group, compile_fn):
    from torch.nn.parallel import DistributedDataParallel as DDP

    # Compile first, then wrap (nanoGPT's order): dynamo sees the active DDP module at run time
    # and splits the graph at bucket boundaries (DDPOptimizer) so all-reduces overlap backward;
    # the compile scope is the knob's, as on one GPU, so scaling compares like with like.
    inner = compile_fn(model)
    cuda = group.device.type == "cuda"
    ddp = DDP(
        inner,
        device_ids=[group.device.index] if cuda else None,
        bucket_cap_mb=k.ddp_bucket_cap_mb,
        gradient_as_bucket_view=k.ddp_grad_as_bucket_view,
        static_graph=k.ddp_static_graph,
    )
    _register_hook(ddp, k.grad_compression)

    def grad_sync(last: bool):
        return contextlib.nullcontext() if last else ddp.no_sync()

    return ddp, grad_sync


def _register_hook(ddp, compression: str) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if compression == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif compression == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif compression == "powersgd":
        # start_powerSGD_iter=2: the earliest allowed with error feedback; the default (1000)
        # would run plain all-reduce for the whole of a short trial and measure nothing new.
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=POWERSGD_RANK, start_powerSGD_iter=2
        )
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)


def _fsdp2(model, config: TrialConfig, compile_fn, compiled_regions: Callable[[str], None]):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    k = config.knobs
    # Parameters are all-gathered in the compute dtype (bf16 for bf16/fp8); gradients are
    # reduce-scattered in fsdp_reduce_dtype. Sharded master weights stay fp32 either way.
    mp = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16 if k.precision.is_half else None,
        reduce_dtype=torch.bfloat16 if k.fsdp_reduce_dtype == "bf16" else torch.float32,
    )
    reshard = k.parallel == "fsdp2"
    blocks = _blocks(model, config.model.n_layer)
    if blocks is not None:
        kind = type(blocks[0]).__name__
        for i in range(len(blocks)):
            # torchtitan's order: compile each block, then shard it. Dynamo does not trace
            # FSDP2's hooks, so per-block graphs are what a whole-model compile would get too:
            # under FSDP2 every compile is per block, whatever compile_scope says.
            blocks[i] = compile_fn(blocks[i], scope=CompileScope.MODEL)
            fully_shard(blocks[i], mp_policy=mp, reshard_after_forward=reshard)
        if k.compile_mode != CompileMode.NONE:
            # What the trainer must compile the same way to run at the measured speed: the
            # blocks, each its own graph (the output layer stays eager under the root's shard).
            compiled_regions(f"{len(blocks)} {kind} blocks (FSDP2 shards each)")
    # The root holds what is left: embeddings, the final norm and the (tied) output layer.
    fully_shard(model, mp_policy=mp, reshard_after_forward=reshard)

    def grad_sync(last: bool):
        model.set_requires_gradient_sync(last)
        return contextlib.nullcontext()

    return model, grad_sync
