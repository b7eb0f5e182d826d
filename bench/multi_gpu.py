"""Multi-GPU trials on the 2-H200 machine, each through workers.launch.run_trial_process (one
fresh process per rank), with scaling efficiency against the same config on one GPU.

    python bench/multi_gpu.py --out $OUT                  # everything, within --budget-s
    python bench/multi_gpu.py --only gpt2 --out $OUT      # one or more groups: gpt2 nccl llama
    python bench/multi_gpu.py --dry-run                   # print the plan, run nothing
    python bench/multi_gpu.py --smoke --only nccl --out /tmp/x   # CPU plumbing check (gloo)

Groups (in priority order; the script stops launching at --budget-s and always writes what it
has, rewriting the JSON after every trial):
  gpt2   GPT-2 124M bf16 mb32 flash: 1 GPU eager + compiled (the baselines), 2 GPUs with ddp,
         fsdp2, fsdp2-no-reshard eager, and ddp/fsdp2 compiled.
  nccl   the eager DDP config under NCCL variations (algo Ring/Tree, proto Simple/LL/LL128,
         bucket 100 MB, bf16 compression), each twice, interleaved, beside the default twice:
         communication settings often differ by less than the noise (docs/measurement.md).
         ~16 eager trials: give it its own call (`--only nccl`) to stay within ~8 minutes;
         gpt2 + llama fit in another.
  llama  Llama 1B bf16 mb4 flash: 1 GPU vs 2 GPUs with ddp and fsdp2.
  interference  the eager GPT-2 1-GPU config alone on GPU 0, then two copies side by side (GPU 0
         and GPU 1 at once), interleaved, 3 rounds: whether independent 1-GPU trials may share
         a node without measuring each other (issue 9, item 6).

Per trial: tokens/s (all ranks), per-GPU tokens/s, scaling efficiency (per-GPU rate at k GPUs /
rate of the same knobs at 1 GPU), spread, peak memory (largest rank), status. Results go to
OUT/multi_gpu.json and OUT/multi_gpu.md.

One file over the size rule on purpose: it is a device script, and one device call copies and
runs one file, so the groups, the plan and the report stay together here.
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

from autotuner.spec import Device, Knobs, MeasureSettings, ModelSpec, TrialConfig
from bench.gpu_validation import _fmt, _spread, _write

GROUPS = ("gpt2", "nccl", "llama", "interference")
INTERFERENCE_ROUNDS = 3
# docs/measurement.md's 1 s repeats, a short warm-up: an eager GPT-2 trial is ~15 s of wall time.
MEASURE = MeasureSettings(repeats=3, min_repeat_s=1.0, warmup_min_steps=3, warmup_max_steps=15)
EAGER_TIMEOUT_S = 90
COMPILE_TIMEOUT_S = 180
GPT2 = {"preset": "gpt2-124m"}
LLAMA = {"preset": "llama-1b"}
GPT2_KNOBS = {
    "precision": "bf16",
    "attention": "flash",
    "micro_batch_size": 32,
    "vocab_pad_multiple": 64,
}
LLAMA_KNOBS = {"precision": "bf16", "attention": "flash", "micro_batch_size": 4}
NCCL_VARIANTS = {
    "default (bucket 25MB)": {},
    "algo Ring": {"nccl_algo": "Ring"},
    "algo Tree": {"nccl_algo": "Tree"},
    "proto Simple": {"nccl_proto": "Simple"},
    "proto LL": {"nccl_proto": "LL"},
    "proto LL128": {"nccl_proto": "LL128"},
    "bucket 100MB": {"ddp_bucket_cap_mb": 100},
    "bf16 compression": {"grad_compression": "bf16"},
}
NCCL_ROUNDS = 2
SMOKE = False


@dataclass
class Planned:
    name: str
    group: str
    model: dict[str, Any]
    knobs: dict[str, Any]
    num_gpus: int
    baseline: str | None = None  # the 1-GPU trial of the same knobs (scaling efficiency)
    timeout_s: float = EAGER_TIMEOUT_S
    extra: dict[str, Any] = field(default_factory=dict)
    # Run at the same time as this trial, each pinned to its GPU (interference group).
    side_by_side: list[str] = field(default_factory=list)

    def config(self) -> TrialConfig:
        model, knobs = self.model, dict(self.knobs)
        measure = MEASURE.model_copy(update={"timeout_s": self.timeout_s})
        if SMOKE:  # CPU plumbing check: tiny models, gloo ranks, short measurements
            model = {"preset": "llama-tiny" if model is LLAMA else "tiny"}
            knobs.update(precision="fp32", attention="math", compile_mode="none")
            knobs.pop("vocab_pad_multiple", None)
            measure = measure.model_copy(
                update={
                    "min_repeat_s": 0.05,
                    "warmup_max_steps": 3,
                    "device": Device.CPU,
                    "cpu_threads": 1,
                }
            )
        return TrialConfig(
            model=ModelSpec.resolve(model),
            knobs=Knobs(**knobs),
            measure=measure,
            num_gpus=self.num_gpus,
            **self.extra,
        )


def plan_gpt2() -> list[Planned]:
    p = []
    for compiled in (False, True):
        mode = {"compile_mode": "default"} if compiled else {}
        tag = " compiled" if compiled else " eager"
        timeout = COMPILE_TIMEOUT_S if compiled else EAGER_TIMEOUT_S
        base = f"gpt2 1gpu{tag}"
        p.append(Planned(base, "gpt2", GPT2, {**GPT2_KNOBS, **mode}, 1, None, timeout))
        # fsdp2-no-reshard compiled is left out to keep the group within its budget.
        modes = ("ddp", "fsdp2") if compiled else ("ddp", "fsdp2", "fsdp2-no-reshard")
        for parallel in modes:
            knobs = {**GPT2_KNOBS, **mode, "parallel": parallel}
            p.append(Planned(f"gpt2 2gpu {parallel}{tag}", "gpt2", GPT2, knobs, 2, base, timeout))
    return p


def plan_nccl() -> list[Planned]:
    """The eager DDP config under each NCCL setting, NCCL_ROUNDS times, interleaved."""
    p = []
    for round_ in range(1, NCCL_ROUNDS + 1):
        for label, knobs in NCCL_VARIANTS.items():
            p.append(
                Planned(
                    f"gpt2 2gpu ddp nccl {label} #{round_}",
                    "nccl",
                    GPT2,
                    {**GPT2_KNOBS, "parallel": "ddp", **knobs},
                    2,
                    "gpt2 1gpu eager",
                )
            )
    return p


def plan_llama() -> list[Planned]:
    base = "llama1b 1gpu"
    p = [Planned(base, "llama", LLAMA, LLAMA_KNOBS, 1, None, 120)]
    for parallel in ("ddp", "fsdp2"):
        knobs = {**LLAMA_KNOBS, "parallel": parallel}
        p.append(Planned(f"llama1b 2gpu {parallel}", "llama", LLAMA, knobs, 2, base, 120))
    return p


def plan_interference() -> list[Planned]:
    """The same 1-GPU trial alone, then beside an identical one on the other GPU."""
    p = []
    for round_ in range(1, INTERFERENCE_ROUNDS + 1):
        alone = {"env": {"CUDA_VISIBLE_DEVICES": "0"}}
        p.append(
            Planned(f"gpt2 1gpu alone #{round_}", "interference", GPT2, GPT2_KNOBS, 1, extra=alone)
        )
        p.append(
            Planned(
                f"gpt2 1gpu beside another #{round_}",
                "interference",
                GPT2,
                GPT2_KNOBS,
                1,
                extra={"env": {"CUDA_VISIBLE_DEVICES": "0"}},
                side_by_side=["1"],
            )
        )
    return p


def plan(groups: list[str]) -> list[Planned]:
    """The groups' trials, each 1-GPU baseline they compare against first (--only nccl alone
    still measures its baseline)."""
    planners = {
        "gpt2": plan_gpt2,
        "nccl": plan_nccl,
        "llama": plan_llama,
        "interference": plan_interference,
    }
    chosen = [t for g in GROUPS if g in groups for t in planners[g]()]
    names = {t.name for t in chosen}
    every = {t.name: t for g in GROUPS for t in planners[g]()}
    missing = {t.baseline for t in chosen if t.baseline and t.baseline not in names}
    return [every[name] for name in sorted(missing)] + chosen


# --------------------------------------------------------------------------- running


def _efficiency(rec: dict[str, Any], by_name: dict[str, dict[str, Any]]) -> float | None:
    base = by_name.get(rec.get("baseline") or "")
    r = rec["result"]
    if base is None or r["status"] != "ok" or base["result"]["status"] != "ok":
        return None
    return r["tokens_per_s_per_gpu"] / base["result"]["tokens_per_s_per_gpu"]


def _line(rec: dict[str, Any]) -> str:
    r = rec["result"]
    if r["status"] != "ok":
        msg = (r.get("error_message") or "").splitlines()[0][:100]
        return f"{rec['name']:<40} {r['failure_class']:<12} {msg}"
    eff = rec.get("scaling_efficiency")
    return (
        f"{rec['name']:<40} {r['tokens_per_s']:>11,.0f} tok/s  "
        f"{r['tokens_per_s_per_gpu']:>10,.0f} /GPU  eff {_pct(eff):>6}  "
        f"spread {_spread(r) * 100:4.1f}%  mem {r['peak_mem_gib']:5.1f} GiB"
    )


def run(planned: list[Planned], out: Path, budget_s: float, hard_end_s: float) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    records: list[dict[str, Any]] = []
    doc: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "smoke": SMOKE,
        "trials": records,
        "skipped": [],
    }
    by_name: dict[str, dict[str, Any]] = {}
    for p in planned:
        elapsed = time.monotonic() - start
        timeout = min(p.timeout_s, hard_end_s - elapsed)
        if elapsed > budget_s or timeout < 20:
            doc["skipped"].append(p.name)
            continue
        config = p.config()
        result = _run_side_by_side(p, config, timeout)
        rec = {
            "name": p.name,
            "group": p.group,
            "num_gpus": p.num_gpus,
            "baseline": p.baseline,
            "config": json.loads(config.model_dump_json()),
            "result": json.loads(result.model_dump_json()),
        }
        by_name.setdefault(p.name, rec)
        rec["scaling_efficiency"] = _efficiency(rec, by_name)
        records.append(rec)
        print(f"[{time.monotonic() - start:5.0f}s] {_line(rec)}", flush=True)
        _write(out / "multi_gpu.json", doc)
    doc["elapsed_s"] = time.monotonic() - start
    doc["repeated"] = _repeated(records)
    _write(out / "multi_gpu.json", doc)
    (out / "multi_gpu.md").write_text(markdown(doc))
    return doc


def _run_side_by_side(p: Planned, config: TrialConfig, timeout: float) -> Any:
    """The trial, with its side-by-side copies (other GPUs) running at the same moment; the
    copies' results are only their load (the trial's own result is the one recorded)."""
    from concurrent.futures import ThreadPoolExecutor

    from workers.launch import run_trial_process

    if not p.side_by_side or SMOKE:
        return run_trial_process(config, timeout_s=timeout)
    copies = [
        config.model_copy(update={"env": {**config.env, "CUDA_VISIBLE_DEVICES": gpu}})
        for gpu in p.side_by_side
    ]
    with ThreadPoolExecutor(len(copies) + 1) as pool:
        mine = pool.submit(run_trial_process, config, timeout_s=timeout)
        for c in copies:
            pool.submit(run_trial_process, c, timeout_s=timeout)
        return mine.result()


def _config_name(name: str) -> str:
    return name.rsplit(" #", 1)[0]


def _repeated(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Configs measured in several fresh trials: median of medians and their range."""
    groups: dict[str, list[float]] = {}
    for rec in records:
        if rec["result"]["status"] == "ok" and " #" in rec["name"]:
            groups.setdefault(_config_name(rec["name"]), []).append(rec["result"]["tokens_per_s"])
    return [
        {
            "config": name,
            "trials": len(v),
            "tokens_per_s_median": statistics.median(v),
            "tokens_per_s_min": min(v),
            "tokens_per_s_max": max(v),
        }
        for name, v in groups.items()
    ]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def markdown(doc: dict[str, Any]) -> str:
    records = doc["trials"]
    fp = next((r["result"]["fingerprint"] for r in records if r["result"].get("fingerprint")), None)
    lines = ["# Multi-GPU trials (workers/launch_ranks.py, workers/distributed.py)", ""]
    lines.append(f"Command: `{doc['command']}`, started {doc['started_utc']}")
    if fp:
        lines.append(
            f"Hardware: {fp['device_count']} x {fp['device_name']}, driver {fp.get('driver')}, "
            f"CUDA {fp.get('cuda')}, torch {fp['torch']}, NCCL {fp.get('nccl')}"
        )
    lines += [
        "",
        "Scaling efficiency = per-GPU tokens/s at k GPUs / tokens/s of the same knobs on 1 GPU. "
        "Spread = half the min-max range of a trial's repeats, relative to its median.",
        "",
        "| trial | GPUs | tokens/s | per GPU | efficiency | spread | peak GiB | status |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for rec in records:
        r = rec["result"]
        ok = r["status"] == "ok"
        status = "ok" if ok else f"{r['failure_class']}: {(r.get('error_message') or '')[:80]}"
        lines.append(
            f"| {rec['name']} | {rec['num_gpus']} | {_fmt(r.get('tokens_per_s'), ',.0f')} | "
            f"{_fmt(r.get('tokens_per_s_per_gpu'), ',.0f')} | "
            f"{_pct(rec.get('scaling_efficiency'))} | "
            f"{_fmt(_spread(r) if ok else None, '.1f', 100)} | "
            f"{_fmt(r.get('peak_mem_gib'), '.1f')} | {status.replace('|', '/')} |"
        )
    if doc.get("repeated"):
        lines += ["", "Repeated configs (fresh trials, interleaved):", ""]
        lines += [
            "| config | trials | median tokens/s | min | max |",
            "| --- | --- | --- | --- | --- |",
        ]
        for g in doc["repeated"]:
            lines.append(
                f"| {g['config']} | {g['trials']} | {g['tokens_per_s_median']:,.0f} | "
                f"{g['tokens_per_s_min']:,.0f} | {g['tokens_per_s_max']:,.0f} |"
            )
        lines.append("")
        lines.append("Settings whose ranges overlap are a tie (docs/measurement.md, Noise).")
    if doc.get("skipped"):
        lines += ["", f"Skipped (budget): {', '.join(doc['skipped'])}"]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench/results")))
    ap.add_argument("--only", nargs="+", choices=GROUPS, default=list(GROUPS), help="groups")
    ap.add_argument("--budget-s", type=float, default=440.0, help="launch no trial after this")
    ap.add_argument(
        "--hard-end-s", type=float, default=480.0, help="no trial runs past this (timeout cut)"
    )
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    ap.add_argument("--smoke", action="store_true", help="CPU plumbing check with tiny models")
    args = ap.parse_args()
    global SMOKE
    SMOKE = args.smoke
    planned = plan(args.only)
    if args.dry_run:
        defaults = Knobs().model_dump(mode="json")
        for p in planned:
            knobs = p.config().knobs.model_dump(mode="json")
            changed = {k: v for k, v in knobs.items() if v != defaults[k]}
            print(
                f"{p.group:<6} {p.name:<40} gpus {p.num_gpus}  timeout {p.timeout_s:.0f}s  "
                f"baseline {p.baseline or '-':<18} {changed}"
            )
        budget = f"budget {args.budget_s:.0f} s, hard end {args.hard_end_s:.0f} s"
        print(f"{len(planned)} trials; {budget}")
        return 0
    run(planned, args.out, args.budget_s, args.hard_end_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
