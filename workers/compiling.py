"""torch.compile by the `compile_mode` and `compile_scope` knobs.

- scope `model`: `torch.compile(model)`, one graph per forward (and its backward), so the output
  layer and the loss fuse with the rest. Dynamo traces every layer again (the blocks are
  unrolled), so its compile time grows with depth: 70-150 s a trial for 1-3B models on an H100.
- scope `block`: regional compilation. Each repeated transformer block is compiled on its own
  (`module.compile()`, in place, so parameter names, hooks and checkpoint wrappers stay as they
  are); identical blocks share one traced graph, so the compile costs about one block's, whatever
  the depth. The embedding, final norm, output layer and loss run eagerly between the compiled
  regions: what that costs in throughput is measured, never assumed (bench/regional_compile.py).

The repeated blocks are found by structure, the same way for every family: the shallowest
`nn.ModuleList` whose children (two or more) are all of one class: GPT's `blocks`, Llama's
`layers`, a Hugging Face model's decoder layers (`model.layers`, not the experts list inside a
mixture-of-experts layer, which sits deeper), a factory model's `.blocks`.
"""

from __future__ import annotations

from collections import deque

import torch
import torch.nn as nn

from autotuner.spec import CompileMode, CompileScope
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
    scope `block`; a compiled wrapper sharing its parameters for scope `model`), and a note for
    the result saying what was compiled."""
    if mode == CompileMode.NONE:
        return model, None
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
    kind = type(blocks[0]).__name__
    return model, f"compile_scope block: {len(blocks)} {kind} blocks compiled ({mode.value})"
