"""The search's screen and the worker's support check agree on every knob combination: a config
the worker refuses is one the search never launches, for the same reason word for word, and a
config the search prunes while the worker would run it is pruned as not worth a trial (a knob
that does nothing there), never as impossible. Both read autotuner/spec/support_rules.py; this
walks a grid so that a rule added on one side only shows up here.

The worker side is the real support check (workers/support.py, and workers/distributed.py for a
multi-GPU trial's parallel knobs, in build_step's order) on the CPU and on named fake GPUs
(tests/fakes.py) described as the shared rules take them, with no CUDA needed."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
import torch

from autotuner.executors.base import Target
from autotuner.options import StudyOptions
from autotuner.search.context import SearchContext
from autotuner.search.costmodel import CostModel
from autotuner.search.rules import builtin_verdict
from autotuner.search.screen import Screen
from autotuner.search.space import parse_space
from autotuner.spec import (
    Attention,
    CompileMode,
    Hardware,
    Kernels,
    Knobs,
    ModelSpec,
    Precision,
    RuleKind,
    TrialConfig,
    packages_needed,
)
from tests.fakes import FAKE_A100, FAKE_H200, FAKE_V100
from workers import distributed, support
from workers.errors import EnvironmentProblem, UnsupportedConfig

GPT2 = ModelSpec.resolve({"preset": "gpt2-124m"})
# head_dim 75 (not a multiple of 8) and d_model 300 (not of 16): the shape rules.
ODD = ModelSpec.resolve(
    {"family": "gpt2", "n_layer": 2, "d_model": 300, "n_head": 4, "vocab_size": 512, "seq_len": 64}
)
NEOX = ModelSpec.resolve(  # a Hugging Face architecture Liger does not patch
    {
        "hf_config": {
            "model_type": "gpt_neox",
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "intermediate_size": 128,
            "vocab_size": 512,
            "max_position_embeddings": 64,
        },
        "seq_len": 64,
    }
)
FACTORY = GPT2.model_copy(update={"family": "factory", "factory": "m.py:build"})
CPU = Target("cpu", 0)
GPUS = [Target.from_fingerprint(fp) for fp in (FAKE_H200, FAKE_A100, FAKE_V100)]

ONE_DEVICE_GRID: dict[str, list[Any]] = {
    "precision": list(Precision),
    "attention": list(Attention),
    "compile_mode": [CompileMode.NONE, CompileMode.DEFAULT, CompileMode.REDUCE_OVERHEAD],
    "kernels": list(Kernels),
    "compile_scope": ["model", "block"],
}
PARALLEL_GRID: dict[str, list[Any]] = {
    "parallel": ["ddp", "fsdp2", "fsdp2-no-reshard", "hsdp"],
    "grad_compression": ["none", "fp16", "bf16", "powersgd"],
    "precision": ["bf16", "fp16", "fp32"],
    "compile_mode": ["none", "reduce-overhead"],
    "nccl_algo": ["default", "Ring"],
    "fsdp_reduce_dtype": ["fp32", "bf16"],
    "ddp_static_graph": [False, True],
    "allocator": ["default", "expandable"],
    "optimizer": ["adamw-fused", "adamw-8bit"],
}


def _grid(grid: dict[str, list[Any]], fixed: dict[str, Any]) -> list[Knobs]:
    names = list(grid)
    return [
        Knobs.model_validate({**fixed, **dict(zip(names, values, strict=True))})
        for values in itertools.product(*grid.values())
    ]


def _hardware(target: Target) -> Hardware:
    """The target as the worker on it describes itself (workers/support.py's hardware_of)."""
    return Hardware(target.device_type, target.compute_capability, target.device_name)


def _screen(target: Target, model: ModelSpec, gpus: int) -> Screen:
    """The search's screen with its rules and without the cost model (memory is not the
    question here)."""
    on_cuda = target.device_type == "cuda"
    return Screen(
        SearchContext(
            space=parse_space({"name": "agreement", "knobs": {"precision": ["bf16"]}}),
            model=model,
            target=target,
            gpus=gpus,
            options=StudyOptions(cost_model=False),
            cost=CostModel(model, num_gpus=gpus, on_cuda=on_cuda, limit_gib=target.memory_gib),
        )
    )


def _worker_refusal(
    config: TrialConfig, hardware: Hardware
) -> UnsupportedConfig | EnvironmentProblem | None:
    """What build_step's checks say before building, on a worker with every package the knobs
    can need (this machine may lack liger-kernel and torchao; the search cannot know the
    workers' packages, so a missing one is no disagreement): the support check, then (several
    GPUs) the parallel knobs' check of one rank."""
    packages = frozenset(packages_needed(config.knobs))
    refusal = support.check_on(config, hardware, ranks=config.num_gpus, packages=packages)
    if refusal is None and config.num_gpus > 1:
        refusal = distributed.check(config, torch.device(hardware.device_type))
    return refusal


def _compare(target: Target, model: ModelSpec, gpus: int, grid: list[Knobs]) -> Counter[str]:
    screen, hardware = _screen(target, model, gpus), _hardware(target)
    seen: Counter[str] = Counter()
    for knobs in grid:
        where = f"{knobs.model_dump(mode='json')} on {target.device_name or 'cpu'} x{gpus}"
        prune = screen.check(knobs.model_dump(mode="json"), knobs)
        config = TrialConfig(model=model, knobs=knobs, num_gpus=gpus)
        refusal = _worker_refusal(config, hardware)
        assert not isinstance(refusal, EnvironmentProblem), f"{where}: {refusal}"
        if isinstance(refusal, UnsupportedConfig):
            assert prune is not None and prune.message == str(refusal), f"{where}: {refusal}"
            flat = knobs.model_dump(mode="json")
            assert refusal.knobs and all(flat[k] == v for k, v in refusal.knobs.items()), where
            seen["both refuse"] += 1
        elif prune is not None:
            verdict = builtin_verdict(knobs, target, model, gpus)
            assert verdict is not None and verdict.kind == RuleKind.NOT_WORTH_A_TRIAL, where
            assert prune.message == verdict.message, where
            seen["not worth a trial"] += 1
        else:
            seen["both run"] += 1
    return seen


@pytest.mark.parametrize(
    "model", [GPT2, ODD, NEOX, FACTORY], ids=["gpt2", "odd", "neox", "factory"]
)
def test_one_device_knobs_agree_on_every_device(model: ModelSpec) -> None:
    grid = _grid(ONE_DEVICE_GRID, {})
    seen: Counter[str] = Counter()
    for target in [CPU, *GPUS]:
        seen += _compare(target, model, 1, grid)
    assert seen["both refuse"] and seen["both run"] and seen["not worth a trial"], seen


@pytest.mark.parametrize("target", [CPU, GPUS[0]], ids=["cpu", "h200"])
def test_parallel_knobs_agree_with_one_and_two_gpus(target: Target) -> None:
    attention = {"attention": "math"}
    seen = Counter[str]()
    for gpus in (1, 2):
        seen += _compare(target, GPT2, gpus, _grid(PARALLEL_GRID, attention))
    assert seen["both refuse"] and seen["both run"] and seen["not worth a trial"], seen
