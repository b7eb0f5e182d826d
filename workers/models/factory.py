"""The user's own model (family "factory"): imported and built in the trial process, with the
knobs applied around it. The contract (docs/models.md):

- `factory: "package.module:function"` (importable on the worker) or `"/path/file.py:function"`.
- The function is called with the keyword arguments it declares out of vocab_size (rounded up to
  the `vocab_pad_multiple` knob), seq_len, n_layer, d_model, n_head, n_kv_head, d_ff, dropout,
  tie_embeddings and `attend`, plus the spec's `factory_args`; a `**kwargs` gets all of them.
- It returns an nn.Module whose forward(idx) maps token ids (B, T) to logits (B, T, vocab_size).
- Checkpointing by block: the module lists its transformer blocks as `.blocks` (an
  nn.ModuleList) or through a `transformer_blocks()` method; each is wrapped so the
  `checkpointing` knob applies to it. A model with neither refuses checkpointing.
- Attention: a factory that declares `attend` gets `attend(q, k, v, scale=None)`, causal
  attention over (B, heads, T, head_dim) tensors with the trial's backend
  (workers/models/attention.py); one that does not, refuses the attention knob (it cannot pin a
  kernel inside code it does not see).

Precision (autocast, float8) and torch.compile wrap the built model as for every family. A
factory that cannot be built or run raises UnsupportedConfig naming what is wrong: a property of
the model spec, never a crash. One whose module (or a package it imports) this worker cannot
import raises EnvironmentProblem: the study stops there with the package to install.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from autotuner.spec import Attention, Checkpointing, Kernels, ModelSpec
from workers.errors import EnvironmentProblem, UnsupportedConfig, missing_package
from workers.models.attention import attend
from workers.models.checkpointing import checkpoint_blocks

# The operator's factory directories as `serve` exports them to its workers (the same variable
# as autotuner/study/factory_access.py ENV_VAR; the data plane does not import that module).
FACTORY_DIRS_ENV = "AUTOTUNER_FACTORY_DIRS"


class FactoryError(UnsupportedConfig):
    """The model factory cannot be used as given; the message says what to fix. Unless it
    names knobs, no knob value is to blame (`{}`): no config of the model can run, and the
    study stops at the first one (autotuner/study/ending.py)."""

    def __init__(self, message: str, knobs: dict[str, Any] | None = None):
        super().__init__(message, {} if knobs is None else knobs)


class FactoryLM(nn.Module):
    """The user's logits model with the built-in families' forward(idx, targets) -> loss."""

    kernels = Kernels.NONE  # the fused kernels need the output layer: factories are refused them

    def __init__(self, inner: nn.Module, vocab_size: int, padded_vocab: int):
        super().__init__()
        self.inner = inner
        self.vocab_size, self.padded_vocab = vocab_size, padded_vocab

    def flops_params(self) -> int:
        """Parameters for the FLOPs count (autotuner/flops.py): counted on the built module, as
        its shapes are the user's, less the padded vocab rows (padding must not raise MFU)."""
        total = sum(p.numel() for p in self.parameters())
        extra = self.padded_vocab - self.vocab_size
        if extra:
            total -= sum(
                extra * p.shape[1]
                for p in self.parameters()
                if p.dim() == 2 and p.shape[0] == self.padded_vocab
            )
        return total

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.head_loss(self.inner(idx), targets)

    def head_loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The loss over the user's logits: the region compile_scope 'block' compiles beside
        the blocks (workers/compiling.py), as the built-in families' output layer and loss."""
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))


def build_factory(
    spec: ModelSpec, *, padded_vocab: int, attention: Attention, checkpointing: Checkpointing
) -> nn.Module:
    assert spec.factory is not None
    fn = load_factory(spec.factory, root=spec.factory_root)
    offered: dict[str, Any] = {
        "vocab_size": padded_vocab,
        "seq_len": spec.seq_len,
        "n_layer": spec.n_layer,
        "d_model": spec.d_model,
        "n_head": spec.n_head,
        "n_kv_head": spec.kv_heads,
        "d_ff": spec.ffn_dim,
        "dropout": spec.dropout,
        "tie_embeddings": spec.tie_embeddings,
        "attend": functools.partial(attend, backend=attention),
        **(spec.factory_args or {}),
    }
    kwargs = _arguments(spec.factory, fn, offered)
    if "attend" not in kwargs:
        # Every attention value is refused so: the model's, not one value's (no knob named).
        raise FactoryError(
            f"{spec.factory} takes no `attend` argument, so the attention knob cannot choose "
            "its kernel: declare `attend` and call attend(q, k, v) for causal attention"
        )
    try:
        inner = fn(**kwargs)
    except (torch.OutOfMemoryError, MemoryError):
        raise
    except ImportError as exc:  # the factory imports a package this worker lacks
        raise missing_package(
            exc,
            f"the model factory {spec.factory}",
            "install it in the workers' Python environment",
        ) from exc
    except Exception as exc:
        raise FactoryError(
            f"{spec.factory}(...) raised {type(exc).__name__}: {exc}; fix the factory"
        ) from exc
    if not isinstance(inner, nn.Module):
        raise FactoryError(
            f"{spec.factory} returned {type(inner).__name__}, not a torch.nn.Module; return the "
            "model (token ids (B, T) -> logits (B, T, vocab_size))"
        )
    if checkpointing != Checkpointing.NONE:
        _checkpoint_blocks(spec.factory, inner, checkpointing)
    _check_output(spec, inner, padded_vocab)
    inner.train()
    return FactoryLM(inner, spec.vocab_size, padded_vocab)


def load_factory(ref: str, *, root: str | None = None) -> Callable[..., Any]:
    """The function `ref` names ("pkg.mod:fn" or "/path/file.py:fn"), or FactoryError.

    `root`: the allowed directory the service found the factory under (ModelSpec.factory_root);
    the code imported must come from there, whatever this worker's path or links say now."""
    _check_operator_dirs(ref, root)
    location, _, attr_path = ref.rpartition(":")
    is_file = location.endswith(".py")
    if root is not None and is_file:
        _check_source(ref, location, root)  # before its code runs
    try:
        module = _import_file(location) if is_file else _import(location, root)
    except (FactoryError, EnvironmentProblem):
        raise
    except ImportError as exc:  # the user's file imports a package this worker lacks
        raise missing_package(
            exc, f"the model factory {location}", "install it in the workers' Python environment"
        ) from exc
    except Exception as exc:  # the user's module failed while importing
        raise FactoryError(
            f"importing {location} for the model factory raised {type(exc).__name__}: {exc}"
        ) from exc
    if root is not None and not is_file:
        _check_source(ref, getattr(module, "__file__", None), root)
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise FactoryError(f"{location} has no attribute {part!r} (from factory {ref!r})")
        obj = getattr(obj, part)
    if not callable(obj):
        raise FactoryError(f"{ref} is a {type(obj).__name__}, not callable: name a function")
    return obj


def _check_operator_dirs(ref: str, root: str | None) -> None:
    """Where the node's environment names the operator's factory directories (a service's
    local Ray inherits them from `serve`; a remote worker's operator may set them), run only
    a factory pinned under one of them: a config that reached this worker without the
    service's check (none set, or another) is refused, not imported."""
    raw = os.environ.get(FACTORY_DIRS_ENV)
    if raw is None:
        return  # `tune`'s workers, or a node whose operator set nothing: the config decides
    allowed = [PurePosixPath(os.path.realpath(d)) for d in raw.split(os.pathsep) if d.strip()]
    if root is None or not any(PurePosixPath(root).is_relative_to(d) for d in allowed):
        raise FactoryError(
            f"model factory {ref}: this worker runs model code only from the factory "
            f"directories in {FACTORY_DIRS_ENV} ({raw or 'none'}), and this config was not "
            "checked against them; submit it through `autotuner serve --factory-dir DIR`"
        )


def _check_source(ref: str, file: str | None, root: str) -> None:
    """Refuse a factory whose code is not a file under `root` (links resolved)."""
    real = PurePosixPath(os.path.realpath(file)) if file else None
    if real is None or not real.is_relative_to(PurePosixPath(root)):
        raise FactoryError(
            f"model factory {ref}: its code on this worker ({file or 'no file'}) is not under "
            f"the factory directory it was allowed from ({root}); give the workers the same "
            "files as the service, under the same path"
        )


def _import(name: str, root: str | None = None) -> Any:
    if root is not None:
        top = name.partition(".")[0]
        loaded = sys.modules.get(top)
        if loaded is None and importlib.machinery.PathFinder.find_spec(top, [root]) is None:
            _check_source(name, None, root)  # not there: nothing elsewhere is imported instead
        if loaded is not None:
            _check_source(name, getattr(loaded, "__file__", None), root)
        if root not in sys.path:
            sys.path.insert(0, root)  # the allowed directory first: no same-named module wins
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        # The module, or one it imports, is not on this worker: no config can run here.
        raise missing_package(
            exc,
            f"the model factory module {name!r}",
            "install it in the workers' Python environment, put it on their PYTHONPATH, or "
            "name a file: 'path/file.py:function'",
        ) from exc


def _import_file(path: str) -> Any:
    file = Path(path)
    if not file.is_file():
        raise FactoryError(f"model factory file {path} not found on this worker")
    name = f"autotuner_factory_{abs(hash(str(file.resolve())))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up here
    spec.loader.exec_module(module)
    return module


def _arguments(ref: str, fn: Callable[..., Any], offered: dict[str, Any]) -> dict[str, Any]:
    """The offered keyword arguments the factory declares (all of them for a **kwargs)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return offered
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return offered
    missing = [
        name
        for name, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and name not in offered
    ]
    if missing:
        raise FactoryError(
            f"{ref} requires {', '.join(missing)}, which the model spec does not give: add "
            f"them under factory_args (sizes it can take: vocab_size, seq_len, n_layer, d_model, "
            f"n_head, n_kv_head, d_ff, dropout, tie_embeddings, attend)"
        )
    return {name: value for name, value in offered.items() if name in params}


def _checkpoint_blocks(ref: str, model: nn.Module, mode: Checkpointing) -> None:
    """Wrap each block the model lists (`.blocks` or `transformer_blocks()`) in place."""
    method = getattr(model, "transformer_blocks", None)
    blocks = list(method()) if callable(method) else getattr(model, "blocks", None)
    if blocks is None or not all(isinstance(b, nn.Module) for b in blocks) or not len(blocks):
        raise FactoryError(
            f"checkpointing {mode.value!r} needs the model's blocks: give the module built by "
            f"{ref} a `.blocks` nn.ModuleList or a `transformer_blocks()` method listing them",
            {"checkpointing": mode.value},
        )
    checkpoint_blocks(model, blocks, mode)


def _check_output(spec: ModelSpec, model: nn.Module, vocab: int) -> None:
    """One forward of one full-length sequence: logits must be (1, seq_len, vocab_size)."""
    device = next(model.parameters(), torch.empty(0)).device
    idx = torch.zeros(1, spec.seq_len, dtype=torch.long, device=device)
    try:
        with torch.no_grad():
            out = model(idx)
    except (torch.OutOfMemoryError, MemoryError):
        raise
    except Exception as exc:
        raise FactoryError(
            f"the model built by {spec.factory} failed on token ids of shape (1, {spec.seq_len}): "
            f"{type(exc).__name__}: {exc}; its forward must take a (B, T) LongTensor"
        ) from exc
    want = (1, spec.seq_len, vocab)
    padded = f", {spec.vocab_size} padded by vocab_pad_multiple" if vocab != spec.vocab_size else ""
    got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
    if got != want:
        raise FactoryError(
            f"the model built by {spec.factory} returned {got} for token ids (1, {spec.seq_len}); "
            f"expected logits of shape {want} (vocab_size {vocab}{padded})"
        )
