"""Knobs on real models, each arm a trial in a fresh process (workers.launch.run_trial_process):

- `regional`: compile_scope `model` against `block` (regional compilation) on each model: the
  compile time each takes (cold: every arm has its own compile cache) and the tokens/s each
  measures, at one micro-batch. Decides whether per-block compile is worth its throughput.
- `kernels`: kernels `none`, `fused-ce` and `liger` (`--kernels`: others, cut-cross-entropy's
  `cce`) on each model, eager (kernels compose with any compile: the tests show it; eager keeps
  the arms cheap), at `--micro-batch` and then doubled while it fits: peak memory and tokens/s
  at the micro-batch each allows.
- `modes`: kernels `none` and `cce` (`--kernels`: others, Liger's) with compiled blocks under
  the compile modes other than `default` (`reduce-overhead`: CUDA graphs;
  `max-autotune-no-cudagraphs`: autotuned kernels): whether each composes, its tokens/s, peak
  and compile time.
- `fused-loss`: kernels `none`, `fused-ce` (Liger) and `cce` (cut-cross-entropy) on each model at
  one micro-batch, eager, with compiled blocks and under a whole-model compile: tokens/s, peak
  memory, compile time and what the compile did (graph breaks, in the trial's notes). The cce
  arms run first (whether CCE traces in a whole-model graph is the question), fused-ce under a
  whole-model compile last (it is known not to trace). Then, in this process, the three losses
  and the output layer's input gradients of one micro-batch from the same weights (`parity`).

    python3 bench/hf_knobs.py regional examples/hf/llama-3.2-1b.yaml ... --out $OUT/regional.json
    python3 bench/hf_knobs.py kernels examples/hf/llama-3.2-1b.yaml ... --out $OUT/kernels.json
    python3 bench/hf_knobs.py fused-loss examples/hf/llama-3.2-1b.yaml --out $OUT/loss.json
    python3 bench/hf_knobs.py modes examples/hf/llama-3.2-1b.yaml --out $OUT/modes.json
    python3 bench/hf_knobs.py modes examples/hf/llama-3.2-1b.yaml --kernels liger,fused-ce ...
    python3 bench/hf_knobs.py modes ... --modes max-autotune-no-cudagraphs   # one mode only

The JSON is written after every trial, so a call that runs out of time keeps what it measured;
`--budget-s` skips the arms that would start after it. A table is printed last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotuner.inputs import load_model_spec
from autotuner.spec import (
    CompileMode,
    Kernels,
    Knobs,
    MeasureSettings,
    TrialConfig,
    TrialStatus,
)

BASE = {"precision": "bf16", "attention": "flash", "vocab_pad_multiple": 64}


def base_knobs(spec: Any) -> dict[str, Any]:
    """BASE for this model: flex where it caps its attention logits (Gemma 2) or keeps a
    window shorter than the sequence, which flash cannot (autotuner/spec/support_rules.py)."""
    capped = spec.attention_softcap or spec.attention_window
    return {**BASE, "attention": "flex"} if capped else dict(BASE)


MEASURE = MeasureSettings(repeats=3, min_repeat_s=1.0, timeout_s=900)


def _row(model: str, arm: dict[str, Any], r) -> dict[str, Any]:
    return {
        "model": model,
        **arm,
        "status": r.status.value,
        "failure_class": r.failure_class.value if r.failure_class else None,
        "error": (r.error_message or "")[:400] or None,
        "tokens_per_s": r.tokens_per_s,
        "tokens_per_s_min": r.tokens_per_s_min,
        "tokens_per_s_max": r.tokens_per_s_max,
        "mfu": r.mfu,
        "compile_s": r.compile_s,
        "first_step_s": r.first_step_s,
        "peak_mem_gib": r.peak_mem_gib,
        "peak_reserved_gib": r.peak_reserved_gib,
        "memory_limit_gib": r.memory_limit_gib,
        "wall_s": r.wall_s,
        "device": r.fingerprint.device_name if r.fingerprint else None,
        "notes": r.notes,
    }


class Recorder:
    def __init__(self, out: Path, budget_s: float):
        self.out, self.rows, self.deadline = out, [], time.monotonic() + budget_s

    def run(self, path: str, arm: dict[str, Any], study: str) -> Any:
        """One trial of `arm` on the model at `path`; None when the budget is spent."""
        if time.monotonic() > self.deadline:
            print(f"skipped (budget): {Path(path).stem} {arm}", flush=True)
            return None
        from workers.launch import run_trial_process

        spec = load_model_spec(path)
        knobs = Knobs(**{**base_knobs(spec), **arm})
        config = TrialConfig(model=spec, knobs=knobs, measure=MEASURE, study_id=study)
        r = run_trial_process(config, timeout_s=MEASURE.timeout_s)
        row = _row(Path(path).stem, arm, r)
        self.rows.append(row)
        self.out.write_text(json.dumps(self.rows, indent=1))
        print(json.dumps({k: row[k] for k in list(row)[:14]}), flush=True)
        return r


def regional(models: list[str], rec: Recorder, micro_batch: int) -> None:
    for path in models:
        for scope in ("block", "model"):
            arm = {"micro_batch_size": micro_batch, "compile_mode": "default"}
            rec.run(path, {**arm, "compile_scope": scope}, f"regional-{Path(path).stem}-{scope}")


def kernels(
    models: list[str], rec: Recorder, micro_batch: int, doublings: int, values: list[str]
) -> None:
    for path in models:
        for value in values:
            mb = micro_batch
            for _ in range(doublings + 1):
                r = rec.run(path, {"micro_batch_size": mb, "kernels": value}, "kernels")
                if r is None or r.status != TrialStatus.OK:
                    break
                mb *= 2


MODES = ("reduce-overhead", "max-autotune-no-cudagraphs")


def modes(
    models: list[str], rec: Recorder, micro_batch: int, kernels: list[str], compile_modes: list[str]
) -> None:
    for path in models:
        for mode in compile_modes:
            for value in kernels:
                arm = {"micro_batch_size": micro_batch, "kernels": value}
                rec.run(path, {**arm, "compile_mode": mode, "compile_scope": "block"}, "modes")


# fused-loss's arms, most informative first, so that a spent budget drops the least.
FUSED_LOSS_ARMS: list[dict[str, Any]] = [
    {"kernels": "cce", "compile_mode": "default", "compile_scope": "model"},
    {"kernels": "none", "compile_mode": "default", "compile_scope": "model"},
    {"kernels": "cce", "compile_mode": "default", "compile_scope": "block"},
    {"kernels": "none", "compile_mode": "default", "compile_scope": "block"},
    {"kernels": "fused-ce", "compile_mode": "default", "compile_scope": "block"},
    {"kernels": "cce"},
    {"kernels": "none"},
    {"kernels": "fused-ce"},
    {"kernels": "fused-ce", "compile_mode": "default", "compile_scope": "model"},
]


def fused_loss(models: list[str], rec: Recorder, micro_batch: int) -> None:
    for path in models:
        for arm in FUSED_LOSS_ARMS:
            rec.run(path, {"micro_batch_size": micro_batch, **arm}, "fused-loss")
    for path in models:
        row = {"model": Path(path).stem, "parity": loss_parity(path, micro_batch)}
        rec.rows.append(row)
        rec.out.write_text(json.dumps(rec.rows, indent=1))
        print(json.dumps(row), flush=True)


def loss_parity(path: str, micro_batch: int) -> dict[str, Any]:
    """One micro-batch's loss and the output layer's input gradient under each kernels value,
    from the same weights and tokens (bf16 autocast, eager): the model is built once, unfused,
    and only its loss path is switched (for a Hugging Face model `kernels` changes nothing else
    but Liger's patch, which fused-ce and cce do not take). Runs after the trials, in this
    process, so that no trial shares the GPU with it."""
    import torch

    from autotuner.spec import Kernels
    from workers.models import build_model

    spec = load_model_spec(path)
    knobs = Knobs(**{**base_knobs(spec), "micro_batch_size": micro_batch})
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = build_model(spec, knobs)
    vocab = spec.vocab_size
    idx = torch.randint(0, vocab, (micro_batch, spec.seq_len), device="cuda")
    targets = torch.randint(0, vocab, (micro_batch, spec.seq_len), device="cuda")
    grads: dict[str, torch.Tensor] = {}
    out: dict[str, Any] = {}

    def keep(name: str):
        def hook(_module, _grad_input, grad_output):
            grads[name] = grad_output[0].detach().float().clone()

        return hook

    norm = _final_norm(model)
    for value in ("none", "fused-ce", "cce"):
        model.kernels = Kernels(value)
        model.zero_grad(set_to_none=True)
        handle = norm.register_full_backward_hook(keep(value))
        try:
            torch.cuda.reset_peak_memory_stats()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(idx, targets)
            loss.backward()
            torch.cuda.synchronize()
            out[value] = {
                "loss": loss.item(),
                "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
            }
        except Exception as exc:  # a kernel that fails is this row's answer
            out[value] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        finally:
            handle.remove()
    ref = grads.get("none")
    for value in ("fused-ce", "cce"):
        if "loss" in out.get(value, {}) and "loss" in out["none"]:
            out[value]["loss_rel_diff"] = abs(out[value]["loss"] / out["none"]["loss"] - 1)
        if ref is not None and value in grads:
            g = grads[value]
            cos = torch.nn.functional.cosine_similarity(g.flatten(), ref.flatten(), dim=0)
            out[value]["grad_cosine"] = cos.item()
            out[value]["grad_rel_err"] = ((g - ref).norm() / ref.norm()).item()
    del model
    torch.cuda.empty_cache()
    return out


def _final_norm(model):
    """The module whose output is the fused loss's input (the decoder's final norm): its
    backward hook sees the gradient the loss hands back to the decoder."""
    inner = getattr(model, "inner", None)
    if inner is not None:
        return getattr(inner, inner.base_model_prefix).norm
    return model.ln_f if hasattr(model, "ln_f") else model.norm


def _table(rows: list[dict[str, Any]]) -> None:
    print(f"{'model':<22}{'arm':<34}{'tok/s':>10}{'compile s':>10}{'peak GiB':>10}  status")
    for row in rows:
        if "parity" in row:
            print(f"{row['model']:<22}parity {json.dumps(row['parity'])}")
            continue
        arm = " ".join(
            f"{k}={row[k]}"
            for k in ("micro_batch_size", "compile_mode", "compile_scope", "kernels")
            if row.get(k) is not None
        )
        tps = f"{row['tokens_per_s']:,.0f}" if row["tokens_per_s"] else "-"
        comp = f"{row['compile_s']:.1f}" if row["compile_s"] is not None else "-"
        peak = f"{row['peak_mem_gib']:.1f}" if row["peak_mem_gib"] is not None else "-"
        print(f"{row['model']:<22}{arm:<60}{tps:>10}{comp:>10}{peak:>10}  {row['status']}")
        breaks = [n for n in row.get("notes") or [] if "graph break" in n]
        if breaks:
            print(f"{'':<22}{'; '.join(breaks)[:300]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["regional", "kernels", "fused-loss", "modes"])
    parser.add_argument("models", nargs="+", help="model spec files (examples/hf/*.yaml)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--doublings", type=int, default=2, help="kernels: micro-batch doublings")
    parser.add_argument("--budget-s", type=float, default=540.0)
    parser.add_argument(
        "--kernels",
        help="kernels, modes: the kernels values to run, comma-separated (default: none, "
        "fused-ce and liger for kernels; none and cce for modes)",
    )
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="modes: the compile modes to run, comma-separated (default: %(default)s)",
    )
    args = parser.parse_args()
    default = "none,cce" if args.what == "modes" else "none,fused-ce,liger"
    values = (args.kernels or default).split(",")
    known = [k.value for k in Kernels]
    if unknown := [k for k in values if k not in known]:
        parser.error(f"--kernels: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    chosen_modes = args.modes.split(",")
    known_modes = [m.value for m in CompileMode if m != CompileMode.NONE]
    if unknown := [m for m in chosen_modes if m not in known_modes]:
        parser.error(f"--modes: unknown {', '.join(unknown)} (known: {', '.join(known_modes)})")
    rec = Recorder(args.out, args.budget_s)
    if args.what == "regional":
        regional(args.models, rec, args.micro_batch)
    elif args.what == "modes":
        modes(args.models, rec, args.micro_batch, values, chosen_modes)
    elif args.what == "fused-loss":
        fused_loss(args.models, rec, args.micro_batch)
    else:
        kernels(args.models, rec, args.micro_batch, args.doublings, values)
    _table(rec.rows)


if __name__ == "__main__":
    main()
