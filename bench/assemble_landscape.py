"""Assemble a replay landscape (docs/landscape-format.md) from trials that were already run.

Reads every real trial of one model from the files a GPU session commits, keeps the ones that
measured the same thing, merges repeated measurements of one config, and writes a landscape
`ReplayExecutor` and `bench/replay.py` read:

    python bench/assemble_landscape.py --model llama-1b \
        --out bench/results/landscape_llama_1b_h200.json SOURCE [SOURCE ...]

SOURCE is one of
- a `bench/gpu_validation.py` result (`{"part": .., "trials": [{params, config, result}]}`):
  full TrialResults with the model each trial ran;
- an `autotuner trials --all --json` export (`trials-NAME.json`): a list of trial rows. Such a
  row names neither its model nor its non-searched knobs, so the export is read with the
  `best-NAME.json` beside it (`autotuner best --json` of the same study): its `model` is the
  study's model, its `knobs` the study's fixed values, its `fingerprint` the hardware (used
  when its key equals the row's fingerprint id). Rows are rebuilt into TrialResults from the
  exported columns only (no repeats, phases or telemetry); `wall_s` is the row's, else
  finished_at - started_at (what the coordinator waited, the process start included);
- a study database (`*.db`, SQLite): every trial's config (its model as run) and full result.

Knobs that cannot change such a trial (loader, NCCL, DDP/FSDP settings with one GPU and
synthetic data; workers/trial.py inactive_knobs) are set to their defaults before configs are
compared: studies that left loader_workers at 2 or at 4 ran the same config.

What is kept (everything else is counted in the landscape's `excluded`):
- same model: the preset's sizes exactly, at full depth (n_layer) and the preset's seq_len;
  `proxy` rows (a shallower model, --proxy-layers) never count, whatever their file says;
- one GPU, synthetic data (a trial on `loader` data, an old data_source value, is another
  measurement, as Landscape.load treats it), a full measurement (no early-stopped trial), on
  one software/hardware fingerprint;
- trials that ran: pruned rows cost nothing and measured nothing; `headroom` rows (an extra
  evaluation pass and checkpoint save after the repeats) are not search trials and are left
  out, and so are the numerics check's `parity` and `parity-ref` rows (loss-parity steps
  whose tokens/s counts the compiling first step); `remeasure` rows are fresh-process
  measurements of a config and are kept;
- failed trials (oom, compile_error, crash, ...) on their first attempt, as the format allows:
  a search pays their wall time (a replayed crash is retried by the coordinator, as for real);
  but not a compile budget that the study's time left cut below its space's (a recording
  session's last minutes: `truncated_compile_budget`), which says how long the session had
  left, not what the config costs.

Global batch: recorded, never hidden. Each entry's params carry `global_batch_tokens`
(micro-batch x grad_accum x seq_len; grad_accum derived from the row's global batch when the
study held one and did not list it), and the landscape's `global_batches` counts configs per
global batch. Trials at different global batches are different training runs: replay one with
`bench/replay.py --global-batch N` (the replay notes a landscape that mixes them).

Identical configs (every knob equal) are merged into one entry, since the replay answers a
config with one result: its `tokens_per_s` is the median of the successful measurements
(statistics.median: the mean of the middle two for an even count), its min/max the widest
spread of those measurements' repeats, and every other field from the measurement closest to
that median. The time a search pays, `wall_s` and `compile_s`, is the median over the
measurements that were a config's first visit in their study (re-measurements run with a warm
compile cache, so they are not what a first trial pays), all of them when there are none such.
When a config has both successes and failures, the successes define it and the failures are
listed (here: CUDA-graph failures of reduce-overhead with accumulation from before commit
9d97a91 fixed them). Every measurement is listed in the entry's `measurements` and notes.

The same trial read from two sources (a database and its trials export) counts once: trials
are identified by start time and params.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sqlite3
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotuner.inputs import read_model_spec_file
from autotuner.purpose import Purpose
from autotuner.spec import (
    LEGACY_KNOBS,
    Fingerprint,
    Knobs,
    ModelSpec,
    TrialConfig,
    TrialResult,
    TrialStatus,
    canonical_params,
)
from bench.record_landscape import truncated_compile_budget
from workers.trial import inactive_knobs

# Sizes that make two models the same model (seq_len and n_layer are checked by name, too).
SHAPE = ("family", "n_layer", "d_model", "n_head", "n_kv_head", "d_ff", "vocab_size", "seq_len")
# A loss-parity trial's tokens/s counts every step, the compiling first one too (workers/trial.py).
_PARITY_WHY = "numerics check's loss-parity trial (not a measurement)"
NOT_SEARCH = {
    Purpose.HEADROOM: "headroom check (eval + checkpoint after the repeats)",
    Purpose.PARITY: _PARITY_WHY,
    Purpose.PARITY_REFERENCE: _PARITY_WHY,
}


@dataclass
class Measurement:
    knobs: dict[str, Any]  # every Knobs field, JSON values
    result: TrialResult
    source: str
    trial: int | str
    purpose: str
    started: str | None = None
    model: dict[str, Any] = field(default_factory=dict)
    num_gpus: int = 1
    data_source: str = "synthetic"

    @property
    def identity(self) -> tuple[str, str] | None:
        return (self.started, canonical_params(self.knobs)) if self.started else None


# --------------------------------------------------------------------------- reading sources


def read_source(path: Path) -> list[Measurement]:
    if path.suffix == ".db":
        return read_db(path)
    data = json.loads(path.read_text())
    if isinstance(data, dict) and "trials" in data:
        return read_validation(path, data)
    if isinstance(data, list):
        return read_trials_export(path, data)
    raise SystemExit(f"{path}: not a validation result, a trials export or a database")


def read_validation(path: Path, data: dict[str, Any]) -> list[Measurement]:
    out = []
    for t in data["trials"]:
        cfg = t.get("config") or {}
        if "result" not in t or not cfg:
            continue
        measure = cfg.get("measure") or {}
        out.append(
            Measurement(
                knobs=_full_knobs(cfg["knobs"]),
                result=TrialResult.model_validate(t["result"]),
                source=_rel(path),
                trial=t.get("name", "?"),
                purpose="validation",
                started=None,
                model=cfg["model"],
                num_gpus=cfg.get("num_gpus", 1),
                data_source=t["params"].get("data_source")
                or measure.get("data_source")
                or "synthetic",
            )
        )
    return out


def read_trials_export(path: Path, rows: list[dict[str, Any]]) -> list[Measurement]:
    best_path = path.with_name(path.name.replace("trials-", "best-", 1))
    if best_path == path or not best_path.exists():
        raise SystemExit(
            f"{path}: a trials export names no model; expected {best_path.name} beside it"
        )
    best = json.loads(best_path.read_text())["best"]
    model, study_knobs = best["model"], best["knobs"]
    fp = Fingerprint.model_validate(best["fingerprint"]) if best.get("fingerprint") else None
    out = []
    for r in rows:
        if r["state"] == "pruned" or (r.get("tokens_per_s") is None and not r.get("error_class")):
            out.append(_skipped(path, r, "not run (pruned)"))
            continue
        params = {k: v for k, v in r["params"].items() if k not in LEGACY_KNOBS}
        knobs = {**study_knobs, **params}
        knobs.pop("data_source", None)
        gb = r.get("global_batch_tokens")
        if "grad_accum" not in params and gb:
            # The study held its global batch; grad_accum followed from the micro-batch. (No
            # global batch: grad_accum was the study's fixed value, in its knobs.)
            per_step = int(knobs["micro_batch_size"]) * int(model["seq_len"])
            knobs["grad_accum"] = gb // per_step
        wall = r.get("wall_s")
        if wall is None and r.get("started_at") and r.get("finished_at"):
            wall = (_time(r["finished_at"]) - _time(r["started_at"])).total_seconds()
        row_fp = fp if fp is not None and fp.key == r.get("fingerprint") else None
        tokens_per_step = int(knobs["micro_batch_size"]) * int(knobs["grad_accum"])
        common: dict[str, Any] = {
            "wall_s": wall,
            "compile_s": r.get("compile_s"),
            "fingerprint": row_fp,
            "tokens_per_step": tokens_per_step * int(model["seq_len"]),
            "notes": [f"rebuilt from {_rel(path)} row #{r['number']} (exported columns only)"],
        }
        if r.get("tokens_per_s") is not None and r["state"] == "complete":
            result = TrialResult(
                status=TrialStatus.OK,
                tokens_per_s=r["tokens_per_s"],
                tokens_per_s_min=r.get("tokens_per_s_min"),
                tokens_per_s_max=r.get("tokens_per_s_max"),
                tokens_per_s_per_gpu=r.get("tokens_per_s_per_gpu"),
                mfu=r.get("mfu"),
                peak_mem_gib=r.get("peak_mem_gib"),
                **common,
            )
        else:
            result = TrialResult.failure(r["error_class"], r.get("error_message") or "", **common)
        out.append(
            Measurement(
                knobs=_full_knobs(knobs),
                result=result,
                source=_rel(path),
                trial=r["number"],
                purpose=r.get("purpose") or "search",
                started=_iso(r.get("started_at")),
                model=model,
                num_gpus=1,
                data_source=r["params"].get("data_source", "synthetic"),
            )
            if (r.get("attempt") or 1) == 1
            else _skipped(path, r, "a retry (the replay's coordinator retries for itself)")
        )
    return out


def read_db(path: Path) -> list[Measurement]:
    # Read-only, but not `immutable`: that skips the write-ahead log, where a study that just
    # ended (a recording session) may still hold its last trials.
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    out = []
    try:
        rows = con.execute(
            "SELECT t.number, t.state, t.purpose, t.attempt, t.config, t.result, t.started_at, "
            "s.space FROM trials t JOIN studies s ON s.id = t.study_id "
            "ORDER BY t.study_id, t.number"
        ).fetchall()
    finally:
        con.close()
    for r in rows:
        # A pruned row ran nothing, even when it stores a result: a prediction (the cost model's
        # "predicted out of memory") is written as the trial's result so users see why.
        if not r["result"] or not r["config"] or r["state"] == "pruned":
            out.append(_skipped(path, dict(r), "not run"))
            continue
        if (r["attempt"] or 1) != 1:
            out.append(_skipped(path, dict(r), "a retry"))
            continue
        cfg = json.loads(r["config"])
        measure = cfg.get("measure") or {}
        raw = json.loads(r["result"])
        cut = truncated_compile_budget(raw, measure, json.loads(r["space"] or "{}"))
        if cut:
            out.append(_skipped(path, dict(r), cut))
            continue
        out.append(
            Measurement(
                knobs=_full_knobs(cfg["knobs"]),
                result=TrialResult.model_validate(raw),
                source=_rel(path),
                trial=r["number"],
                purpose=r["purpose"] or "search",
                started=_iso(r["started_at"]),
                model=cfg["model"],
                num_gpus=cfg.get("num_gpus", 1),
                data_source=measure.get("data_source") or "synthetic",
            )
        )
    return out


def _skipped(path: Path, row: dict[str, Any], why: str) -> Measurement:
    m = Measurement(
        knobs={},
        result=TrialResult.failure("infra", why),
        source=_rel(path),
        trial=row.get("number", "?"),
        purpose="skipped",
    )
    m.data_source = why
    return m


# --------------------------------------------------------------------------- selecting


def why_excluded(m: Measurement, model: ModelSpec, fingerprint: str | None) -> str | None:
    """Why a measurement is not comparable with the landscape's others (None: it is)."""
    if m.purpose == "skipped":
        return m.data_source
    if m.purpose == "proxy":
        return "proxy trial (a shallower model)"
    if m.purpose in NOT_SEARCH:
        return NOT_SEARCH[m.purpose]
    want = model.model_dump()
    got = {k: m.model.get(k) for k in SHAPE}
    if m.model.get("preset") != model.preset or any(got[k] != want[k] for k in SHAPE):
        diff = {k: got[k] for k in SHAPE if got[k] != want[k]}
        return f"another model ({m.model.get('preset')}, {diff})" if diff else "another preset"
    if m.num_gpus > 1:  # 0: one process on the CPU (a CPU recording's trials)
        return f"{m.num_gpus} GPUs"
    if m.data_source != "synthetic":
        return f"data source {m.data_source}"
    if m.result.stopped_early:
        return "stopped early (not a full measurement)"
    if fingerprint and m.result.fingerprint and m.result.fingerprint.key != fingerprint:
        return f"other hardware/software ({m.result.fingerprint.key})"
    return None


def effective_knobs(knobs: dict[str, Any], model: ModelSpec) -> dict[str, Any]:
    """The knobs with those that cannot change a one-GPU synthetic-data trial (loader, NCCL,
    DDP/FSDP: workers/trial.py inactive_knobs) at their defaults, so that studies that left
    them at different values (loader_workers 2 or 4) do not split one config in two."""
    config = TrialConfig(model=model, knobs=Knobs.model_validate(knobs), num_gpus=1)
    default = Knobs().model_dump(mode="json")
    return {k: default[k] if k in inactive_knobs(config, "cuda") else v for k, v in knobs.items()}


def resolve_model(model_name: str) -> tuple[ModelSpec, str]:
    """The model a landscape is of, and its name there: a preset (llama-1b), or a model spec
    file (examples/hf/llama-3.2-1b.yaml: a Hugging Face config has no preset, so its trials
    are matched on the family and sizes alone, and the landscape is named after the file)."""
    path = Path(model_name)
    if path.suffix in (".yaml", ".yml", ".json") and path.is_file():
        model = ModelSpec.resolve(read_model_spec_file(path))
        return model, model.preset or path.stem
    return ModelSpec.resolve({"preset": model_name}), model_name


def assemble(sources: list[Path], model_name: str, *, command: str | None = None) -> dict[str, Any]:
    model, label = resolve_model(model_name)
    measurements: list[Measurement] = []
    seen: set[tuple[str, str]] = set()
    duplicates = 0
    for src in sources:
        for m in read_source(src):
            if m.identity is not None and m.identity in seen:
                duplicates += 1  # the same trial from a second source
                continue
            if m.identity is not None:
                seen.add(m.identity)
            measurements.append(m)
    keys = Counter(
        m.result.fingerprint.key
        for m in measurements
        if m.result.fingerprint and m.model.get("preset") == model.preset
    )
    fingerprint = keys.most_common(1)[0][0] if keys else None
    kept: list[Measurement] = []
    excluded: Counter[str] = Counter()
    for m in measurements:
        why = why_excluded(m, model, fingerprint)
        if why is None:
            m.knobs = effective_knobs(m.knobs, model)
            kept.append(m)
        elif m.model.get("preset", model.preset) == model.preset or m.purpose == "skipped":
            excluded[f"{m.source}: {why}"] += 1
    if not kept:
        raise SystemExit(f"no comparable trial of {model_name} in {[str(s) for s in sources]}")
    fp = next(m.result.fingerprint for m in kept if m.result.fingerprint)
    groups: dict[str, list[Measurement]] = {}
    for m in kept:
        groups.setdefault(canonical_params(m.knobs), []).append(m)
    entries = [_entry(ms, model, label, fp) for ms in groups.values()]
    entries.sort(key=lambda e: (e["params"]["global_batch_tokens"], canonical_params(e["params"])))
    batches = Counter(e["params"]["global_batch_tokens"] for e in entries)
    return {
        "model": label,
        "recorded_with": command,
        "assembled_from": [_rel(s) for s in sources],
        "merge": "identical configs merged: tokens_per_s = median of the successful "
        "measurements, min/max = their widest spread; wall_s/compile_s = median of the "
        "first-visit measurements; failures listed when successes exist",
        "global_batches": {str(k): batches[k] for k in sorted(batches)},
        "measurements_kept": len(kept),
        "duplicates_dropped": duplicates,
        "excluded": dict(sorted(excluded.items())),
        "entries": entries,
    }


def _entry(ms: list[Measurement], model: ModelSpec, label: str, fp: Fingerprint) -> dict[str, Any]:
    ms = sorted(ms, key=lambda m: (m.started or "", str(m.trial)))
    oks = [m for m in ms if m.result.status == TrialStatus.OK]
    knobs = ms[0].knobs
    if oks:
        tps = statistics.median(m.result.tokens_per_s or 0.0 for m in oks)
        rep = min(oks, key=lambda m: abs((m.result.tokens_per_s or 0.0) - tps))
        first = [m for m in oks if m.purpose != "remeasure"] or oks
        scale = tps / (rep.result.tokens_per_s or tps)
        update: dict[str, Any] = {
            "tokens_per_s": tps,
            "tokens_per_s_min": min(
                m.result.tokens_per_s_min or m.result.tokens_per_s or tps for m in oks
            ),
            "tokens_per_s_max": max(
                m.result.tokens_per_s_max or m.result.tokens_per_s or tps for m in oks
            ),
            "tokens_per_s_per_gpu": tps,
            "mfu": rep.result.mfu * scale if rep.result.mfu else None,
            "wall_s": _median([m.result.wall_s for m in first]),
            "compile_s": _median([m.result.compile_s for m in first]),
        }
        if len(ms) > 1:
            update["phases_s"] = None  # the median wall is not one trial's phases
    else:
        rep = ms[0]
        update = {}
    update["fingerprint"] = rep.result.fingerprint or fp
    listed = [_describe(m) for m in ms]
    notes = list(rep.result.notes)
    if len(ms) > 1:
        notes.append(f"merged from {len(ms)} measurements: " + "; ".join(listed))
    update["notes"] = notes
    result = rep.result.model_copy(update=update)
    gb = int(knobs["micro_batch_size"]) * int(knobs["grad_accum"]) * model.seq_len
    return {
        "params": {
            "model": label,
            **knobs,
            "data_source": "synthetic",
            "seq_len": model.seq_len,
            "n_layer": model.n_layer,
            "global_batch_tokens": gb,
        },
        "result": result.model_dump(mode="json"),
        "measurements": [
            {
                "source": m.source,
                "trial": m.trial,
                "purpose": m.purpose,
                "status": m.result.status.value,
                "failure_class": m.result.failure_class.value if m.result.failure_class else None,
                "tokens_per_s": m.result.tokens_per_s,
                "wall_s": m.result.wall_s,
                "compile_s": m.result.compile_s,
            }
            for m in ms
        ],
    }


def _describe(m: Measurement) -> str:
    what = (
        f"{m.result.tokens_per_s:,.0f} tok/s"
        if m.result.status == TrialStatus.OK
        else f"failed ({m.result.failure_class})"
    )
    return f"{what} ({m.source} #{m.trial}, {m.purpose})"


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _full_knobs(values: dict[str, Any]) -> dict[str, Any]:
    clean = {k: v for k, v in values.items() if k not in LEGACY_KNOBS}
    return Knobs.model_validate(clean).model_dump(mode="json")


def _time(s: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def _iso(s: str | None) -> str | None:
    return _time(s).isoformat(timespec="seconds") if s else None


def _rel(path: Path) -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--model",
        required=True,
        help="model preset (llama-1b) or model spec file (examples/hf/llama-3.2-1b.yaml)",
    )
    ap.add_argument("--out", required=True, help="landscape JSON to write")
    ap.add_argument("sources", nargs="+", type=Path)
    args = ap.parse_args(argv)
    command = "python bench/assemble_landscape.py " + shlex.join(argv or sys.argv[1:])
    doc = assemble(args.sources, args.model, command=command)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(
        f"{args.out}: {len(doc['entries'])} configs from {doc['measurements_kept']} "
        f"measurements; global batches {doc['global_batches']}; "
        f"excluded {sum(doc['excluded'].values())}, duplicates {doc['duplicates_dropped']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
