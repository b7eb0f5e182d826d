"""One GPU session's validation of the data plane, each trial in a fresh process.

Measures GPT-2 124M (12 layers, d 768, 12 heads, seq 1024, vocab 50257 padded to 50304, tied)
and a ~1B Llama-style model (preset llama-1b) over a grid that touches every knob value, checks
repeatability (one config in three fresh processes), and writes a *landscape*: every GPT-2 trial
as {"params": knobs, "result": TrialResult} so the search team can replay it.

    python bench/gpu_validation.py --part 1 --out $OUT      # GPT-2 landscape (eager + compile)
    python bench/gpu_validation.py --part 2 --out $OUT      # repeatability, llama-1b, the rest
    python bench/gpu_validation.py --part 3 --out $OUT      # what 1 and 2 did not reach
    python bench/gpu_validation.py --part 4 --out $OUT      # fp8 under compile, bigger models
    python bench/gpu_validation.py --part 5 --out $OUT      # Llama 3B: bf16 vs fp8 compiled
    python bench/gpu_validation.py --merge DIR1 DIR2 --out bench/results   # join, write Markdown

Each part stops launching trials after --budget-s and always writes what it has (the JSON is
rewritten after every trial, so even a killed run leaves its results behind).

One file over the size rule on purpose: it is a device script, and one device call copies and
runs one file, so each part, its grid and the merge stay together here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotuner.spec import (
    DataSource,
    Device,
    Knobs,
    MeasureSettings,
    ModelSpec,
    TrialConfig,
    TrialResult,
)
from workers.launch import run_trial_process

GPT2 = {"preset": "gpt2-124m"}
LLAMA = {"preset": "llama-1b"}
HF_LLAMA_125M = {
    "hf_config": {
        "model_type": "llama",
        "num_hidden_layers": 12,
        "hidden_size": 768,
        "num_attention_heads": 12,
        "num_key_value_heads": 4,
        "intermediate_size": 2048,
        "vocab_size": 32000,
        "max_position_embeddings": 1024,
        "tie_word_embeddings": True,
    }
}

# Short repeats keep an eager GPT-2 trial to a few seconds of GPU time; the repeatability check
# uses docs/measurement.md's full 1 s repeats.
QUICK = MeasureSettings(
    repeats=3, min_repeat_s=0.3, warmup_min_steps=3, warmup_max_steps=15, timeout_s=60
)
FULL = MeasureSettings(repeats=3, min_repeat_s=1.0, warmup_min_steps=3, warmup_max_steps=30)
EAGER_TIMEOUT_S = 60
COMPILE_TIMEOUT_S = 200
SMOKE = False
BASE = {"precision": "bf16", "attention": "flash", "micro_batch_size": 16, "vocab_pad_multiple": 64}


@dataclass
class Planned:
    name: str
    group: str
    model: dict[str, Any]
    knobs: dict[str, Any]
    measure: MeasureSettings = field(default_factory=lambda: QUICK)
    timeout_s: float = EAGER_TIMEOUT_S
    extra: dict[str, Any] = field(default_factory=dict)  # TrialConfig fields beyond knobs

    def config(self) -> TrialConfig:
        model, measure = self.model, self.measure.model_copy(update={"timeout_s": self.timeout_s})
        if SMOKE:  # a CPU dry run of the script's plumbing: tiny models, short measurements
            model = {"preset": "llama-tiny" if "llama" in str(model) else "tiny"}
            measure = measure.model_copy(
                update={"min_repeat_s": 0.02, "warmup_max_steps": 3, "device": Device.CPU}
            )
        knobs = dict(self.knobs)
        # Recorded beside the knobs (landscapes mark loader entries so), measured as a setting.
        if "data_source" in knobs:
            measure = measure.model_copy(
                update={"data_source": DataSource(knobs.pop("data_source"))}
            )
        return TrialConfig(
            model=ModelSpec.resolve(model),
            knobs=Knobs(**knobs),
            measure=measure,
            **self.extra,
        )


def _gpt2(name: str, group: str, timeout_s: float = EAGER_TIMEOUT_S, **knobs) -> Planned:
    return Planned(name, group, GPT2, {**BASE, **knobs}, timeout_s=timeout_s)


def plan_part1() -> list[Planned]:
    """GPT-2 124M landscape: precision x attention x micro-batch x checkpointing x compile.

    In priority order: the script stops launching at its budget, so what the acceptance checks
    need comes first, then the compile modes, then the wider sweeps.
    """
    p = [
        # Sanity first: if these crash, the script stops instead of burning the session.
        _gpt2("gpt2 bf16 flash mb16", "landscape"),
        _gpt2("gpt2 fp32 math mb16", "landscape", precision="fp32", attention="math"),
        _gpt2("gpt2 bf16 math mb16", "landscape", attention="math"),
    ]
    for prec in ("bf16", "fp32", "fp16", "tf32"):
        for attn in ("efficient", "cudnn", "flash", "math"):
            name = f"gpt2 {prec} {attn} mb16"
            if name not in {x.name for x in p}:
                p.append(_gpt2(name, "landscape", precision=prec, attention=attn))
    p += [
        _gpt2(
            "gpt2 bf16 flash mb16 compile", "landscape", COMPILE_TIMEOUT_S, compile_mode="default"
        ),
        _gpt2(
            "gpt2 bf16 flash mb16 reduce-overhead",
            "landscape",
            COMPILE_TIMEOUT_S,
            compile_mode="reduce-overhead",
        ),
        _gpt2(
            "gpt2 bf16 flex mb16 compile",
            "landscape",
            COMPILE_TIMEOUT_S,
            attention="flex",
            compile_mode="default",
        ),
    ]
    for mb in (4, 8, 32, 64):
        for attn in ("flash", "efficient", "cudnn", "math"):
            p.append(
                _gpt2(f"gpt2 bf16 {attn} mb{mb}", "landscape", micro_batch_size=mb, attention=attn)
            )
    for ckpt in ("selective", "full"):
        for mb in (16, 64):
            for attn in ("flash", "math"):
                p.append(
                    _gpt2(
                        f"gpt2 bf16 {attn} mb{mb} ckpt-{ckpt}",
                        "landscape",
                        micro_batch_size=mb,
                        attention=attn,
                        checkpointing=ckpt,
                    )
                )
    # Where 141 GiB runs out: some of these are expected to be `oom`.
    for mb in (128, 256):
        p.append(_gpt2(f"gpt2 bf16 flash mb{mb}", "landscape", micro_batch_size=mb))
        p.append(
            _gpt2(f"gpt2 bf16 math mb{mb}", "landscape", micro_batch_size=mb, attention="math")
        )
        p.append(
            _gpt2(
                f"gpt2 bf16 flash mb{mb} ckpt-full",
                "landscape",
                micro_batch_size=mb,
                checkpointing="full",
            )
        )
    p.append(
        _gpt2(
            "gpt2 fp32 efficient mb256",
            "landscape",
            micro_batch_size=256,
            precision="fp32",
            attention="efficient",
        )
    )
    for mb in (4, 32):
        p.append(
            _gpt2(
                f"gpt2 tf32 efficient mb{mb}",
                "landscape",
                micro_batch_size=mb,
                precision="tf32",
                attention="efficient",
            )
        )
        p.append(
            _gpt2(f"gpt2 fp16 flash mb{mb}", "landscape", micro_batch_size=mb, precision="fp16")
        )
    p.append(
        _gpt2(
            "gpt2 bf16 flash mb32 compile",
            "landscape",
            COMPILE_TIMEOUT_S,
            micro_batch_size=32,
            compile_mode="default",
        )
    )
    return p


def plan_part2() -> list[Planned]:
    """Repeatability, the remaining knob values, llama-1b, max-autotune, then more landscape.

    In priority order (part 1 showed ~10 s of process start-up per trial on the H200 machine,
    so not everything fits one call): acceptance first, then one trial per knob value not yet
    touched, then llama-1b, then the slow compile mode, then the landscape's wider sweep.
    """
    p = [
        Planned(f"repeat {i} gpt2 bf16 flash mb16", "repeatability", GPT2, dict(BASE), measure=FULL)
        for i in (1, 2, 3)
    ]
    p += [
        _gpt2("gpt2 bf16 flash mb16 adamw-foreach", "landscape", optimizer="adamw-foreach"),
        _gpt2("gpt2 bf16 flash mb16 pad1", "landscape", vocab_pad_multiple=1),
        _gpt2("gpt2 bf16 flash mb16 pad128", "landscape", vocab_pad_multiple=128),
        _gpt2(
            "gpt2 bf16 flash mb16 loader w4",
            "landscape",
            data_source="loader",
            loader_workers=4,
            pin_memory=True,
            prefetch_factor=4,
        ),
        _gpt2(
            "gpt2 bf16 flash mb16 loader w0",
            "landscape",
            data_source="loader",
            loader_workers=0,
            pin_memory=False,
        ),
        _gpt2("gpt2 fp8-tensorwise flash mb16", "landscape", precision="fp8-tensorwise"),
        _gpt2("gpt2 fp8-rowwise flash mb16", "landscape", precision="fp8-rowwise"),
        _gpt2("gpt2 bf16 flash mb4 grad-accum4", "landscape", micro_batch_size=4, grad_accum=4),
        Planned(
            "gpt2 bf16 flash mb64 capped 16GiB",
            "memory-cap",
            GPT2,
            {**BASE, "micro_batch_size": 64},
            measure=QUICK.model_copy(update={"memory_limit_gib": 16.0}),
        ),
        Planned(
            "hf llama-125m bf16 flash mb16", "hf", HF_LLAMA_125M, {**BASE, "vocab_pad_multiple": 1}
        ),
    ]
    lk = {"precision": "bf16", "attention": "flash", "micro_batch_size": 4}
    p += [
        Planned("llama-1b bf16 flash mb4", "llama-1b", LLAMA, lk),
        Planned(
            "llama-1b fp8-tensorwise flash mb4",
            "llama-1b",
            LLAMA,
            {**lk, "precision": "fp8-tensorwise"},
        ),
        Planned(
            "llama-1b fp8-rowwise flash mb4", "llama-1b", LLAMA, {**lk, "precision": "fp8-rowwise"}
        ),
        Planned(
            "llama-1b bf16 flash mb8 ckpt-full",
            "llama-1b",
            LLAMA,
            {**lk, "micro_batch_size": 8, "checkpointing": "full"},
        ),
        Planned(
            "llama-1b bf16 flash mb4 ckpt-selective",
            "llama-1b",
            LLAMA,
            {**lk, "checkpointing": "selective"},
        ),
        # Autotuning every matmul can take minutes; its timeout is cut to what is left.
        _gpt2(
            "gpt2 bf16 flash mb16 max-autotune-no-cudagraphs",
            "landscape",
            240,
            compile_mode="max-autotune-no-cudagraphs",
        ),
        # More landscape: where memory runs out, checkpointing, larger micro-batches.
        _gpt2("gpt2 bf16 flash mb256", "landscape", micro_batch_size=256),
        _gpt2("gpt2 bf16 math mb256", "landscape", micro_batch_size=256, attention="math"),
        _gpt2("gpt2 bf16 flash mb16 ckpt-selective", "landscape", checkpointing="selective"),
        _gpt2("gpt2 bf16 flash mb16 ckpt-full", "landscape", checkpointing="full"),
        _gpt2("gpt2 bf16 flash mb32", "landscape", micro_batch_size=32),
        _gpt2("gpt2 bf16 cudnn mb32", "landscape", micro_batch_size=32, attention="cudnn"),
        _gpt2("gpt2 bf16 flash mb128", "landscape", micro_batch_size=128),
        _gpt2("gpt2 bf16 flash mb64", "landscape", micro_batch_size=64),
        _gpt2(
            "gpt2 bf16 flash mb256 ckpt-full",
            "landscape",
            micro_batch_size=256,
            checkpointing="full",
        ),
        _gpt2(
            "gpt2 bf16 math mb64 ckpt-selective",
            "landscape",
            micro_batch_size=64,
            attention="math",
            checkpointing="selective",
        ),
        _gpt2("gpt2 fp16 flash mb32", "landscape", micro_batch_size=32, precision="fp16"),
        _gpt2(
            "gpt2 tf32 efficient mb32",
            "landscape",
            micro_batch_size=32,
            precision="tf32",
            attention="efficient",
        ),
        _gpt2("gpt2 bf16 efficient mb32", "landscape", micro_batch_size=32, attention="efficient"),
        _gpt2("gpt2 bf16 math mb32", "landscape", micro_batch_size=32, attention="math"),
    ]
    return p


# --------------------------------------------------------------------------- running


def _params(planned: Planned, config: TrialConfig) -> dict[str, Any]:
    return {"model": planned.model.get("preset", "hf"), **config.knobs.model_dump(mode="json")}


def _line(rec: dict[str, Any]) -> str:
    r = rec["result"]
    if r["status"] == "ok":
        mfu = f"{r['mfu'] * 100:5.1f}%" if r.get("mfu") is not None else "   - "
        comp = f" compile {r['compile_s']:.0f}s" if r.get("compile_s") else ""
        return (
            f"{rec['name']:<48} {r['tokens_per_s']:>11,.0f} tok/s  MFU {mfu}  "
            f"mem {r['peak_mem_gib']:6.1f} GiB  spread {_spread(r) * 100:4.1f}%{comp}"
        )
    msg = (r.get("error_message") or "").splitlines()[0][:90]
    return f"{rec['name']:<48} {r['failure_class']:<13} {msg}"


def _spread(r: dict[str, Any]) -> float:
    return (r["tokens_per_s_max"] - r["tokens_per_s_min"]) / 2 / r["tokens_per_s"]


def plan_part3(recorded: Path) -> list[Planned]:
    """What parts 1 and 2 planned but did not reach (per the merged results), eager first.

    max-autotune is left out: it did not finish compiling within 240 s on the H200.
    """
    done = {t["name"] for t in json.loads(recorded.read_text())["trials"]}
    rest, seen = [], set(done)
    for p in plan_part1() + plan_part2():  # part 2 repeats some of part 1's names
        if p.name not in seen:
            seen.add(p.name)
            rest.append(p)
    rest = [p for p in rest if p.knobs.get("compile_mode") not in ("max-autotune-no-cudagraphs",)]
    return sorted(rest, key=lambda p: p.knobs.get("compile_mode", "none") != "none")


def plan_part4() -> list[Planned]:
    """fp8 (torchao tensorwise and rowwise) under torch.compile, against bf16 compiled at the
    same micro-batch, on GPT-2 124M and Llama 1B; then reduce-overhead's whole-trial peak
    memory. Eager fp8 was 2-3x slower than bf16 (part 2): compile is where fp8's casts fuse.

    In priority order (compiles are ~1 minute each on the H200; what does not fit is skipped).
    """
    gk = {**BASE, "micro_batch_size": 64, "compile_mode": "default"}
    lk = {"precision": "bf16", "attention": "flash", "micro_batch_size": 8}
    lk_c = {**lk, "compile_mode": "default"}
    ct = COMPILE_TIMEOUT_S
    return [
        Planned("gpt2 bf16 flash mb64 compile", "fp8-compile", GPT2, gk, timeout_s=ct),
        Planned(
            "gpt2 fp8-rowwise flash mb64 compile",
            "fp8-compile",
            GPT2,
            {**gk, "precision": "fp8-rowwise"},
            timeout_s=ct,
        ),
        Planned("llama-1b bf16 flash mb8 compile", "fp8-compile", LLAMA, lk_c, timeout_s=240),
        Planned(
            "llama-1b fp8-rowwise flash mb8 compile",
            "fp8-compile",
            LLAMA,
            {**lk_c, "precision": "fp8-rowwise"},
            timeout_s=240,
        ),
        Planned(
            "gpt2 fp8-tensorwise flash mb64 compile",
            "fp8-compile",
            GPT2,
            {**gk, "precision": "fp8-tensorwise"},
            timeout_s=ct,
        ),
        Planned(
            "llama-1b fp8-tensorwise flash mb8 compile",
            "fp8-compile",
            LLAMA,
            {**lk_c, "precision": "fp8-tensorwise"},
            timeout_s=240,
        ),
        _gpt2(
            "gpt2 bf16 flash mb16 reduce-overhead (peak memory)",
            "reduce-overhead-memory",
            ct,
            compile_mode="reduce-overhead",
        ),
    ]


def plan_part5() -> list[Planned]:
    """Llama 3B, bf16 against fp8-tensorwise, both compiled, at micro-batch 4: does part 4's
    Llama 1B fp8 win (1.17x) hold at 3B, where the matmuls are larger still?"""
    lk = {
        "precision": "bf16",
        "attention": "flash",
        "micro_batch_size": 4,
        "compile_mode": "default",
    }
    llama3b = {"preset": "llama-3b"}
    return [
        Planned("llama-3b bf16 flash mb4 compile", "fp8-compile", llama3b, lk, timeout_s=200),
        Planned(
            "llama-3b fp8-tensorwise flash mb4 compile",
            "fp8-compile",
            llama3b,
            {**lk, "precision": "fp8-tensorwise"},
            timeout_s=220,
        ),
    ]


def run_part(part: int, out: Path, budget_s: float, hard_end_s: float) -> None:
    if part == 3:
        plan = plan_part3(Path(__file__).resolve().parent / "results" / "gpu_validation_h200.json")
    elif part == 4:
        plan = plan_part4()
    elif part == 5:
        plan = plan_part5()
    else:
        plan = plan_part1() if part == 1 else plan_part2()
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    records: list[dict[str, Any]] = []
    skipped: list[str] = []
    doc = {
        "part": part,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "budget_s": budget_s,
        "trials": records,
        "skipped": skipped,
    }
    for planned in plan:
        elapsed = time.monotonic() - start
        timeout = min(planned.timeout_s, hard_end_s - elapsed)
        if elapsed > budget_s or timeout < 20:
            skipped.append(planned.name)
            continue
        config = planned.config()
        result = run_trial_process(config, timeout_s=timeout)
        rec = {
            "name": planned.name,
            "group": planned.group,
            "params": _params(planned, config),
            "config": json.loads(config.model_dump_json()),
            "result": json.loads(result.model_dump_json()),
        }
        records.append(rec)
        print(f"[{time.monotonic() - start:5.0f}s] {_line(rec)}", flush=True)
        _write(out / f"gpu_validation_part{part}.json", doc)
        # The first three configs of each part run on any H200: if none of them measures, the
        # worker is broken and the rest of the session's device time would be wasted.
        if len(records) == 3 and not any(r["result"]["status"] == "ok" for r in records):
            print("the first three trials all failed: stopping (a bug, not a measurement)")
            skipped.extend(p.name for p in plan[plan.index(planned) + 1 :])
            break
    doc["elapsed_s"] = time.monotonic() - start
    _write(out / f"gpu_validation_part{part}.json", doc)
    print(f"part {part}: {len(records)} trials in {doc['elapsed_s']:.0f} s; skipped {skipped}")


def _write(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


# --------------------------------------------------------------------------- merge + report


def _ok(rec) -> bool:
    return rec["result"]["status"] == "ok"


def _tps(recs: dict[str, dict], name: str) -> float | None:
    rec = recs.get(name)
    return rec["result"]["tokens_per_s"] if rec and _ok(rec) else None


def acceptance(records: list[dict[str, Any]]) -> list[tuple[str, bool | None, str]]:
    by = {r["name"]: r for r in records}
    checks: list[tuple[str, bool | None, str]] = []

    def ratio(check: str, fast: str, slow: str) -> None:
        a, b = _tps(by, fast), _tps(by, slow)
        if a is None or b is None:
            checks.append((check, None, f"missing: {fast!r} or {slow!r}"))
            return
        fa, sb = by[fast]["result"], by[slow]["result"]
        # "Measurably": the faster one's worst repeat beats the slower one's best.
        ok = fa["tokens_per_s_min"] > sb["tokens_per_s_max"]
        checks.append((check, ok, f"{fast}: {a:,.0f} vs {slow}: {b:,.0f} tok/s (x{a / b:.2f})"))

    ratio(
        "bf16 beats fp32 (eager, efficient attention)",
        "gpt2 bf16 efficient mb16",
        "gpt2 fp32 efficient mb16",
    )
    ratio(
        "compile beats eager (bf16 flash mb16)",
        "gpt2 bf16 flash mb16 compile",
        "gpt2 bf16 flash mb16",
    )
    fused = [
        n
        for n in ("gpt2 bf16 flash mb16", "gpt2 bf16 efficient mb16", "gpt2 bf16 cudnn mb16")
        if _tps(by, n)
    ]
    if fused:
        best = max(fused, key=lambda n: _tps(by, n))
        ratio("a fused attention backend beats math (bf16 mb16)", best, "gpt2 bf16 math mb16")
    reps = [r for r in records if r["group"] == "repeatability" and _ok(r)]
    if len(reps) == 3:
        t = [r["result"]["tokens_per_s"] for r in reps]
        spread = (max(t) - min(t)) / statistics.median(t)
        checks.append(
            (
                "three fresh processes agree within 3%",
                spread <= 0.03,
                f"medians {', '.join(f'{x:,.0f}' for x in t)}: max-min = "
                f"{spread * 100:.2f}% of the median",
            )
        )
    else:
        checks.append(
            ("three fresh processes agree within 3%", None, f"{len(reps)} of 3 repeat runs ok")
        )
    mfus = [
        (r["result"]["mfu"], r["name"])
        for r in records
        if _ok(r) and r["params"]["model"] == "gpt2-124m" and r["result"].get("mfu")
    ]
    if mfus:
        top, name = max(mfus)
        checks.append(
            ("no GPT-2 124M MFU above 60%", top <= 0.60, f"highest {top * 100:.1f}% ({name})")
        )
    return checks


def _fmt(x, spec: str, scale: float = 1.0) -> str:
    return "-" if x is None else format(x * scale, spec)


def markdown(doc: dict[str, Any]) -> str:
    records = doc["trials"]
    fp = next((r["result"]["fingerprint"] for r in records if r["result"].get("fingerprint")), None)
    lines = ["# GPU validation of the data plane (workers/)", ""]
    if fp:
        lines += [
            f"Hardware: {fp['device_count']} x {fp['device_name']} (compute capability "
            f"{fp['compute_capability']}, {fp['memory_total_gib']} GiB), driver {fp['driver']}, "
            f"CUDA {fp['cuda']}, torch {fp['torch']}, NCCL {fp['nccl']}, Python {fp['python']}, "
            f"CPU {fp['cpu']}.",
            "",
        ]
    lines += ["Commands (one device call each):", ""]
    lines += [f"    {c}" for c in doc["commands"]]
    lines += [
        "",
        "Each trial ran in a fresh process through `workers.launch.run_trial_process`. Landscape "
        "trials: 3 repeats of >= 0.3 s after a warm-up of >= 3 stable steps; the repeatability "
        "runs: 3 repeats of >= 1 s. Throughput is the median repeat; spread is half the "
        "min-max range of the repeats relative to the median. MFU: "
        "`autotuner.flops` (6N + 12LdT, non-causal attention, vs the dense bf16 peak 989.5 "
        "TFLOP/s, fp8 runs too). Peak memory: `torch.cuda.max_memory_allocated` over the "
        "measured steps. Compile time: the first step minus a steady step (inductor's on-disk "
        "cache is shared by the trials of one call, so later compiles of a similar graph may "
        "be faster than a cold one).",
        "",
        "## Acceptance",
        "",
        "| check | pass | evidence |",
        "| --- | --- | --- |",
    ]
    for check, ok, evidence in acceptance(records):
        mark = {True: "yes", False: "**NO**", None: "not measured"}[ok]
        lines.append(f"| {check} | {mark} | {evidence} |")
    lines += [
        "",
        "## Trials",
        "",
        "| trial | status | tokens/s | MFU | peak alloc / reserved GiB | spread | first step s | "
        "compile s | SM clock MHz (max) | note |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for rec in records:
        r = rec["result"]
        tel = r.get("telemetry") or {}
        clock = (
            f"{tel['sm_clock_mean_mhz']:.0f} ({tel['sm_clock_max_mhz']})"
            if tel.get("sm_clock_mean_mhz")
            else "-"
        )
        if r["status"] == "ok":
            note = ", ".join(tel.get("throttle_reasons") or []) or ""
            lines.append(
                f"| {rec['name']} | ok | {r['tokens_per_s']:,.0f} | {_fmt(r['mfu'], '.1%')} | "
                f"{_fmt(r['peak_mem_gib'], '.1f')} / {_fmt(r['peak_reserved_gib'], '.1f')} | "
                f"{_spread(r):.1%} | "
                f"{_fmt(r['first_step_s'], '.1f')} | {_fmt(r.get('compile_s'), '.0f')} | "
                f"{clock} | {note} |"
            )
        else:
            msg = (r.get("error_message") or "").splitlines()[0][:120].replace("|", "/")
            lines.append(
                f"| {rec['name']} | {r['failure_class']} | - | - | - | - | - | - | - | {msg} |"
            )
    if doc.get("skipped"):
        lines += ["", "Not run (out of the session's time): " + ", ".join(doc["skipped"])]
    if doc.get("notes"):
        lines += ["", "## Caveats", ""] + [f"- {n}" for n in doc["notes"]]
    return "\n".join(lines) + "\n"


def merge(dirs: list[Path], out: Path, suffix: str, notes: list[str]) -> None:
    parts = []
    for d in dirs:
        if d.suffix == ".db":  # an autotuner study database: its measured trials join too
            parts.append(_part_from_study_db(d))
        elif d.is_file():  # an earlier merged result: its trials and notes carry over
            earlier = json.loads(d.read_text())
            notes = [*earlier.get("notes", []), *notes]
            parts += [
                {
                    "part": 0,
                    "command": "; ".join(earlier["commands"]),
                    "trials": earlier["trials"],
                    "skipped": earlier.get("skipped", []),
                }
            ]
        else:
            parts += [
                json.loads(p.read_text()) for p in sorted(d.glob("gpu_validation_part*.json"))
            ]
    parts.sort(key=lambda d: d["part"])
    records = [rec for d in parts for rec in d["trials"]]
    for rec in records:  # validate: everything we publish is a real TrialResult
        TrialResult.model_validate(rec["result"])
    doc = {
        "notes": notes,
        "commands": [d["command"] for d in parts],
        "parts": [{k: v for k, v in d.items() if k != "trials"} for d in parts],
        "trials": records,
        # Skipped by one part but run by a later one: not skipped.
        "skipped": sorted(
            {s for d in parts for s in d.get("skipped", [])} - {r["name"] for r in records}
        ),
    }
    out.mkdir(parents=True, exist_ok=True)
    _write(out / f"gpu_validation_{suffix}.json", doc)
    landscape = [
        {"params": rec["params"], "result": rec["result"]}
        for rec in records
        if rec["group"] == "landscape" and rec["params"]["model"] == "gpt2-124m"
    ]
    _write(out / f"landscape_gpt2_124m_{suffix}.json", landscape)
    (out / f"gpu_validation_{suffix}.md").write_text(markdown(doc))
    print(f"{len(records)} trials, {len(landscape)} in the landscape -> {out}")


def _part_from_study_db(path: Path) -> dict[str, Any]:
    """The finished, first-measurement trials of `autotuner tune` studies, as landscape records."""
    import sqlite3

    rows = sqlite3.connect(path).execute(
        "SELECT number, config, result FROM trials WHERE result IS NOT NULL "
        "AND purpose != 'remeasure' ORDER BY number"
    )
    trials = []
    for number, config_json, result_json in rows:
        config = TrialConfig.model_validate_json(config_json)
        knobs = config.knobs.model_dump(mode="json")
        name = "tune #{} gpt2 {} {} mb{} compile-{}".format(
            number,
            knobs["precision"],
            knobs["attention"],
            knobs["micro_batch_size"],
            knobs["compile_mode"],
        )
        trials.append(
            {
                "name": name,
                "group": "landscape",
                "params": {"model": config.model.preset or "custom", **knobs},
                "config": json.loads(config_json),
                "result": json.loads(result_json),
            }
        )
    return {
        "part": 9,
        "command": f"autotuner tune (study database {path.name})",
        "trials": trials,
        "skipped": [],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", type=int, choices=(1, 2, 3, 4, 5))
    ap.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        help="directories holding part JSONs, earlier merged JSONs, or study .db files",
    )
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench/results")))
    ap.add_argument(
        "--budget-s", type=float, default=440.0, help="launch no trial after this many seconds"
    )
    ap.add_argument(
        "--hard-end-s",
        type=float,
        default=480.0,
        help="no trial may run past this many seconds (its timeout is cut)",
    )
    ap.add_argument("--suffix", default="h200")
    ap.add_argument("--smoke", action="store_true", help="CPU dry run with tiny models")
    ap.add_argument("--note", action="append", default=[], help="a caveat for the Markdown")
    args = ap.parse_args()
    global SMOKE
    SMOKE = args.smoke
    if args.merge:
        merge(args.merge, args.out, args.suffix, args.note)
        return 0
    if args.part is None:
        ap.error("give --part 1, --part 2 or --merge")
    run_part(args.part, args.out, args.budget_s, args.hard_end_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
