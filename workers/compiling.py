"""torch.compile by the `compile_mode` and `compile_scope` knobs.

- scope `model`: `torch.compile(model)`, one graph per forward (and its backward), so the output
  layer and the loss fuse with the rest. Dynamo traces every layer again (the blocks are
  unrolled), so its compile time grows with depth: 70-150 s a trial for 1-3B models on an H100.
- scope `block`: regional compilation. Each repeated transformer block is compiled on its own
  (`module.compile()`, in place, so parameter names, hooks and checkpoint wrappers stay as they
  are); identical blocks share one traced graph, so the compile costs about one block's, whatever
  the depth. The output region (final norm, output layer and loss: the model's `head_loss`) is
  a second compiled region, so the loss fuses as in a whole-model graph; only the embedding
  (and a Hugging Face model's final norm) runs eagerly. What the scope costs in throughput is
  measured, never assumed (bench/hf_knobs.py regional).

The repeated blocks are found by structure, the same way for every family: the shallowest
`nn.ModuleList` whose children (two or more) are all of one class: GPT's `blocks`, Llama's
`layers`, a Hugging Face model's decoder layers (`model.layers`, not the experts list inside a
mixture-of-experts layer, which sits deeper), a factory model's `.blocks`.

A checkpointed block whose forward has a Python side effect cannot be traced: dynamo refuses the
checkpoint region (eager checkpointing replays the side effect in backward's recompute) and runs
the block eagerly. Every Hugging Face decoder layer has one, transformers' output-capturing hook
(`transformers.utils.output_capturing`, a context variable the hook reads): with activation
checkpointing, a compiled Hugging Face model compiled nothing of its blocks (2 graph breaks and
no graph for compiled blocks, 7 for the whole model, on a tiny Llama on the CPU): the likely
reason fp8 with selective checkpointing ran at a quarter of the speed on the H100 landscape
(its blocks eager, and eager fp8 is slow). Compiling with
`skip_fwd_side_effects_in_bwd_under_checkpoint` (as torchtitan does whenever it compiles) traces
the region and keeps the side effect to the forward: the hook captures nothing in a training
step, and a block that counts its calls counts each forward once, not twice.
"""

from __future__ import annotations

import traceback
from collections import deque

import torch
import torch.nn as nn

from autotuner.spec import CompileMode, CompileScope, Kernels, Knobs
from workers.errors import UnsupportedConfig


def repeated_blocks(model: nn.Module) -> list[nn.Module] | None:
    """The model's repeated blocks, breadth first (the outermost list of like modules)."""
    queue: deque[nn.Module] = deque([model])
    while queue:
        module = queue.popleft()
        if isinstance(module, nn.ModuleList) and len(module) >= 2:
            kinds = {type(child) for child in module}
            if len(kinds) == 1:
                return list(module)
        queue.extend(module.children())
    return None


def compile_model(
    model: nn.Module, mode: CompileMode, scope: CompileScope
) -> tuple[nn.Module, str | None]:
    """The module to call, `model` compiled as the knobs say (itself with compiled blocks for
    scope `block`; a compiled wrapper sharing its parameters for scope `model`), and for scope
    `block` the regions compiled one by one (the result's `compiled_regions`)."""
    if mode == CompileMode.NONE:
        return model, None
    if hasattr(torch._dynamo.config, "skip_fwd_side_effects_in_bwd_under_checkpoint"):
        torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True  # above
    if scope == CompileScope.MODEL:
        return torch.compile(model, mode=mode.value), None
    blocks = repeated_blocks(model)
    if blocks is None:
        raise UnsupportedConfig(
            "compile_scope 'block' compiles each repeated transformer block, and this model has "
            "no nn.ModuleList of like blocks; use compile_scope 'model'",
            {"compile_scope": scope.value},
        )
    for block in blocks:
        block.compile(mode=mode.value)
    regions = f"{len(blocks)} {type(blocks[0]).__name__} blocks"
    if _compiles_head(model):
        # An instance attribute in front of the method: the model's forward calls the compiled
        # region, and its parameters and their names stay the model's.
        model.head_loss = torch.compile(model.head_loss, mode=mode.value)
        regions += " and the output layer with its loss"
    return model, regions


def regions_note(regions: str, mode: CompileMode) -> str:
    """The trial's note for a per-block compile (what the trials table shows)."""
    return f"compile_scope block: {regions} compiled ({mode.value})"


def _compiles_head(model: nn.Module) -> bool:
    """Whether scope `block` compiles the model's output region (`head_loss`: its final norm,
    output layer and loss) too. Left eager, that region cost 5-9% of the whole-model compile's
    throughput on three Hugging Face models (bench/results/hf_knobs_h200): the fp32 logits over a
    128k-256k vocabulary that a compiled loss never materialises. Compiled, 0.6-1.0%
    (bench/results/hf_knobs_h100). The fused kernels' losses stay
    eager: dynamo cannot trace Liger's, and traces cut-cross-entropy's only in pieces."""
    return callable(getattr(model, "head_loss", None)) and getattr(model, "kernels", None) == (
        Kernels.NONE  # a StrEnum: equal to the plain string a model may hold
    )


def fused_loss_untraceable(exc: BaseException, knobs: Knobs) -> UnsupportedConfig | None:
    """A whole-model compile that failed inside the fused kernels' package (liger_kernel, or
    cut_cross_entropy for kernels cce): the pair (kernels, compile_scope model) cannot run,
    whatever else the config says, so the result names both knobs and the search rules out
    exactly that pair (a plain compile error names none).

    Seen on the H200 (torch 2.11, liger-kernel 0.8.5): dynamo cannot trace the fused loss's
    weight-gradient `addmm(..., out_dtype=float32, out=...)` under autocast, in bf16 and fp8
    alike, while the same kernels with compiled blocks (the loss eager) ran."""
    kernels = Kernels(knobs.kernels)  # model_copy(update=...) may leave the plain string
    package = kernels.package
    if package is None or knobs.compile_scope != CompileScope.MODEL:
        return None
    chain, seen = [], set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    frames = [f.filename for e in chain for f in traceback.extract_tb(e.__traceback__)]
    inside = any(package in name for name in frames) or any(package in str(e) for e in chain)
    if not inside:
        return None
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    owner = "cut-cross-entropy's" if kernels == Kernels.CCE else "Liger's"
    return UnsupportedConfig(
        f"torch.compile could not trace {owner} kernels inside a whole-model graph ({first}); "
        f"compile the blocks (compile_scope 'block': the loss runs eagerly) with kernels "
        f"{kernels.value!r}, or use kernels 'none' with compile_scope 'model'",
        {"kernels": kernels.value, "compile_scope": CompileScope.MODEL.value},
    )


def graph_breaks() -> str | None:
    """The graph breaks dynamo made so far in this process, as a note (None: none). A whole
    model that breaks runs the code between its graphs eagerly: a fused loss that traces only
    in pieces shows up here rather than as a failure."""
    from torch._dynamo.utils import counters

    breaks = counters["graph_break"]
    total = sum(breaks.values())
    if not total:
        return None
    reasons = "; ".join(" ".join(str(r).split())[:160] for r, _ in breaks.most_common(3))
    return f"torch.compile: {total} graph break{'s' if total > 1 else ''} ({reasons})"
