"""What one optimizer step costs, by optimizer, against fused AdamW measured in the same run.

Builds the model on the device (workers.models.build_model, as a trial does), gives every
parameter a random gradient, and times `optimizer.step()` alone (no forward or backward) for each
optimizer the worker builds (workers/training.py build_optimizer): fused and foreach AdamW and
torchao's AdamW8bit. Rounds rotate the optimizers so load on a shared machine hits them alike.
Per optimizer it prints the median milliseconds a step, the same per parameter tensor, the ratio
to fused AdamW, and on a GPU how far the step's peak memory rises above the steady state (the
memory model's `optimizer_step` component: the 8-bit AdamW's dequantised moments of one
parameter), beside the throughput model's prior for the step (costmodel/throughput.py).

    python bench/optimizer_step.py                                   # CPU: llama-tiny, wider
    python bench/optimizer_step.py --preset llama-1b --out $OUT/optimizer-step-h200.json  # GPU
    python bench/optimizer_step.py --out bench/results/optimizer_step_cpu.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from autotuner.executors.base import Target
from autotuner.search.costmodel.memory import GIB, largest_param
from autotuner.search.costmodel.throughput import (
    ADAMW_8BIT_CALL_S,
    PRIOR_MULTIPLIER,
    _Hardware,
    features,
)
from autotuner.spec import Knobs, ModelSpec, Optimizer
from workers.models import build_model
from workers.training import build_optimizer

OPTIMIZERS = [Optimizer.ADAMW_FUSED, Optimizer.ADAMW_FOREACH, Optimizer.ADAMW_8BIT]
# On the CPU: llama-tiny's layout at a width where the step moves megabytes, not kilobytes.
CPU_MODEL = {"preset": "llama-tiny", "d_model": 512, "n_head": 8, "n_kv_head": 8, "n_layer": 4}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step_ms(opt: torch.optim.Optimizer, device: torch.device, steps: int) -> float:
    _sync(device)
    t = time.perf_counter()
    for _ in range(steps):
        opt.step()
    _sync(device)
    return (time.perf_counter() - t) / steps * 1e3


def call_overhead_us(device: torch.device, tensors: int = 100, steps: int = 10) -> float:
    """AdamW8bit's cost a parameter tensor where the tensors are too small to cost compute
    (16 values: fp32 moments, the same compiled update): the host's share, which
    costmodel/throughput.py ADAMW_8BIT_CALL_S prices."""
    with device:
        ps = [torch.nn.Parameter(torch.randn(4, 4)) for _ in range(tensors)]
    for p in ps:
        p.grad = torch.randn_like(p)
    opt = build_optimizer(torch.nn.ParameterList(ps), Optimizer.ADAMW_8BIT)
    for _ in range(3):
        opt.step()
    return _step_ms(opt, device, steps) / tensors * 1e3


def _prior_ms(model: ModelSpec, knobs: Knobs, target: Target) -> float | None:
    """The throughput model's prior for one step (its optimizer term x tokens a step)."""
    if target.device_type != "cuda":
        return None  # the CPU's nominal rates are placeholders (costmodel/throughput.py)
    from autotuner.search.costmodel.throughput import TERMS

    x = dict(zip(TERMS, features(model, knobs, _Hardware.of(target), 1), strict=True))
    term = {
        Optimizer.ADAMW_FUSED: "optimizer_fused",
        Optimizer.ADAMW_FOREACH: "optimizer_foreach",
        Optimizer.ADAMW_8BIT: "optimizer_8bit",
    }[knobs.optimizer]
    tokens = knobs.micro_batch_size * knobs.grad_accum * model.seq_len
    return x[term] * PRIOR_MULTIPLIER[term] * tokens * 1e3


def measure(spec: ModelSpec, device: torch.device, rounds: int, steps: int) -> dict[str, Any]:
    knobs = Knobs(precision="bf16", attention="math", micro_batch_size=1)
    torch.manual_seed(0)
    with device:
        model = build_model(spec, knobs)
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.randn_like(p)
    target = Target("cpu", 0)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        cc = torch.cuda.get_device_capability(device)
        total = torch.cuda.get_device_properties(device).total_memory / GIB
        target = Target("cuda", 1, name, cc, total)
    optimizers: dict[Optimizer, torch.optim.Optimizer] = {}
    first_ms: dict[str, float] = {}
    step_peak_gib: dict[str, float | None] = {}
    for kind in OPTIMIZERS:
        opt = build_optimizer(model, kind)
        t = time.perf_counter()
        opt.step()  # the states are created (and torchao compiles its update per shape)
        _sync(device)
        first_ms[kind.value] = (time.perf_counter() - t) * 1e3
        step_peak_gib[kind.value] = None
        if device.type == "cuda":
            steady = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            opt.step()
            _sync(device)
            step_peak_gib[kind.value] = (torch.cuda.max_memory_allocated(device) - steady) / GIB
        optimizers[kind] = opt
        print(f"  {kind.value}: first step {first_ms[kind.value] / 1e3:.1f} s", file=sys.stderr)
    samples: dict[str, list[float]] = {k.value: [] for k in OPTIMIZERS}
    for r in range(rounds):
        order = OPTIMIZERS[r % len(OPTIMIZERS) :] + OPTIMIZERS[: r % len(OPTIMIZERS)]
        for kind in order:
            samples[kind.value].append(_step_ms(optimizers[kind], device, steps))
    n_tensors = len(params)
    base = statistics.median(samples[Optimizer.ADAMW_FUSED.value])
    rows = {}
    for kind in OPTIMIZERS:
        ms = statistics.median(samples[kind.value])
        knobs_k = Knobs.model_validate({**knobs.model_dump(), "optimizer": kind.value})
        rows[kind.value] = {
            "step_ms": round(ms, 3),
            "per_tensor_us": round(ms / n_tensors * 1e3, 1),
            "vs_fused": round(ms / base, 3),
            "samples_ms": [round(s, 3) for s in samples[kind.value]],
            "first_step_ms": round(first_ms[kind.value], 1),
            "step_peak_over_steady_gib": step_peak_gib[kind.value],
            "prior_ms": _prior_ms(spec, knobs_k, target),
        }
    return {
        "model": spec.model_dump(exclude_none=True),
        "params": sum(p.numel() for p in params),
        "tensors": n_tensors,
        "largest_param": largest_param(spec, knobs),
        "device": target.device_name or platform.processor() or "cpu",
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "rounds": rounds,
        "steps_per_sample": steps,
        "adamw_8bit_call_s_prior": ADAMW_8BIT_CALL_S,
        "adamw_8bit_call_us": round(call_overhead_us(device), 1),
        "optimizers": rows,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--preset", help="a model preset (default: a wide llama-tiny on the CPU)")
    ap.add_argument("--layers", type=int, help="override the preset's layer count")
    ap.add_argument("--rounds", type=int, default=5, help="rotations of the optimizers")
    ap.add_argument("--steps", type=int, default=5, help="steps a sample")
    ap.add_argument("--out", type=Path, help="write the JSON here")
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model: dict[str, Any] = {"preset": args.preset} if args.preset else dict(CPU_MODEL)
    if args.layers:
        model["n_layer"] = args.layers
    spec = ModelSpec.resolve(model)
    out = measure(spec, device, args.rounds, args.steps)
    print(
        f"{spec.preset or 'model'} ({out['params'] / 1e6:.0f}M params, {out['tensors']} tensors) "
        f"on {out['device']}, {out['threads']} threads; median of {args.rounds} rounds:"
    )
    print(f"{'optimizer':<15}{'ms/step':>10}{'us/tensor':>11}{'vs fused':>10}{'peak+ GiB':>11}")
    for name, row in out["optimizers"].items():
        peak = row["step_peak_over_steady_gib"]
        print(
            f"{name:<15}{row['step_ms']:>10.2f}{row['per_tensor_us']:>11.1f}"
            f"{row['vs_fused']:>10.2f}{'' if peak is None else f'{peak:.2f}':>11}"
        )
    print(
        f"AdamW8bit's host cost a tensor (16-value tensors): {out['adamw_8bit_call_us']:.0f} us "
        f"(the throughput model's prior: {ADAMW_8BIT_CALL_S * 1e6:.0f} us)"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
