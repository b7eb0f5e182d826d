"""The training step's gradient accumulation outside CUDA-graph memory (compile mode
reduce-overhead with grad_accum > 1) computes the same step as plain accumulation."""

from __future__ import annotations

import copy

import torch

from workers.data import make_batches
from workers.models import build_model
from workers.training import TrainStep, build_optimizer

from .conftest import make_config


def _one_step(model, config, *, cudagraphs: bool) -> TrainStep:
    optimizer = build_optimizer(model, config.knobs.optimizer)
    batches = make_batches(config.knobs, config.measure, config.model, torch.device("cpu"), 0)
    step = TrainStep(
        model,
        optimizer,
        batches,
        grad_accum=config.knobs.grad_accum,
        autocast=lambda: torch.autocast("cpu", enabled=False),
        scaler=None,
        cudagraphs=cudagraphs,
    )
    step()
    return step


def test_accumulating_outside_graph_memory_gives_the_same_step() -> None:
    config = make_config(grad_accum=3, micro_batch_size=2)
    torch.manual_seed(0)
    plain_model = build_model(config.model, config.knobs)
    graphs_model = copy.deepcopy(plain_model)
    plain = _one_step(plain_model, config, cudagraphs=False)
    graphs = _one_step(graphs_model, config, cudagraphs=True)
    assert not plain.accumulate_outside_graphs and graphs.accumulate_outside_graphs
    for a, b in zip(plain_model.parameters(), graphs_model.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    # The step ended like any other: gradients cleared; the buffers are ours, reused.
    assert all(p.grad is None for p in graphs_model.parameters())
    buffers = graphs._grad_buffers
    graphs()
    assert graphs._grad_buffers is buffers


def test_one_micro_step_needs_no_buffers() -> None:
    config = make_config(grad_accum=1)
    step = _one_step(build_model(config.model, config.knobs), config, cudagraphs=True)
    assert not step.accumulate_outside_graphs and step._grad_buffers is None
