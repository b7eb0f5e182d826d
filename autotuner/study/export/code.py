"""Small pieces of Python source that several snippet exports (hf, lightning, pytorch) share."""

from __future__ import annotations

import pprint
from typing import Any

# DDP communication hooks (torch.distributed.algorithms.ddp_comm_hooks), as the worker registers
# them (workers/distributed.py): grad_compression -> (hook expression, state expression).
COMM_HOOKS: dict[str, tuple[str, str]] = {
    "fp16": ("default_hooks.fp16_compress_hook", "None"),
    "bf16": ("default_hooks.bf16_compress_hook", "None"),
    "powersgd": (
        "powerSGD_hook.powerSGD_hook",
        "powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1)",
    ),
}
COMM_HOOK_IMPORT = (
    "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook"
)


def py_literal(value: Any) -> str:
    """A Python literal (True/False/None, not JSON's true/false/null); a dict one key a line."""
    if not isinstance(value, dict) or len(value) < 2:
        return pprint.pformat(value, width=96, sort_dicts=False)
    body = "".join(
        f"    {key!r}: {pprint.pformat(v, sort_dicts=False)},\n" for key, v in value.items()
    )
    return "{\n" + body + "}"


def call_kwargs(name: str, args: dict[str, str]) -> str:
    """`name = dict(\\n    key=expression,\\n)` from already-rendered Python expressions."""
    body = "".join(f"    {key}={expr},\n" for key, expr in args.items())
    return f"{name} = dict(\n{body})"
