"""Issue 10's acceptance for one `tune`: is its recommendation within 3% of the best config
known for the model, and how much faster than the expert default is it?

The best known is the fastest measured entry of the model's landscape at the tune's global
batch that keeps the tune's memory headroom (`--headroom`, the tune's default 10%: a config
that leaves less free is never recommended, so it is no bar to reach), or the tune's own
recommendation if that is faster. `bench/assemble_landscape.py` builds the landscape from
every committed trial of the model; assemble it again with the tune's database so its trials
count too. Configs at another global batch are other training runs and are not compared (the
tune holds one).

    python bench/tune_acceptance.py --best bench/results/DIR/best-llama-1b.json \
        --landscape bench/results/landscape_llama_1b_h200.json [--within 0.03] [--headroom 0.1]

Prints the comparison and exits 0 when the recommendation is within, 1 when it is not.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotuner.option_defaults import DEFAULT_HEADROOM
from autotuner.search.headroom import StoredHeadroom, violation
from autotuner.spec import TrialResult

WITHIN = 0.03


def _gb(entry: dict[str, Any]) -> int | None:
    return entry["params"].get("global_batch_tokens")


def _from_knobs(rec: dict[str, Any]) -> int:
    """Tokens per optimizer step from the winner's knobs (a recommendation stored before the
    `global_batch` entry existed): micro-batch x accumulation x seq_len, one GPU."""
    knobs, model = rec["knobs"], rec["model"]
    return (
        int(knobs["micro_batch_size"]) * int(knobs.get("grad_accum") or 1) * int(model["seq_len"])
    )


def _measured_at(landscape: dict[str, Any], global_batch: int) -> list[dict[str, Any]]:
    return [
        e
        for e in landscape["entries"]
        if _gb(e) == global_batch
        and e["result"].get("status") == "ok"
        and e["result"].get("tokens_per_s")
    ]


def tight(entry: dict[str, Any], headroom: float) -> bool:
    """Whether the entry's measured peak breaks the headroom (as a study judges its trials)."""
    result = TrialResult.model_validate(entry["result"])
    return violation(result, StoredHeadroom(headroom)) > 0


def best_known(
    landscape: dict[str, Any], global_batch: int, headroom: float = DEFAULT_HEADROOM
) -> dict[str, Any] | None:
    """The landscape's fastest measured entry at `global_batch` that keeps the headroom (None:
    none measured there)."""
    kept = [e for e in _measured_at(landscape, global_batch) if not tight(e, headroom)]
    return max(kept, key=lambda e: e["result"]["tokens_per_s"], default=None)


def judge(
    best_view: dict[str, Any],
    landscape: dict[str, Any],
    within: float,
    headroom: float = DEFAULT_HEADROOM,
) -> dict[str, Any]:
    """The recommendation against the best known at its global batch, as a dict to print."""
    rec = best_view["best"]
    if rec is None:
        raise SystemExit(f"study {best_view['study']} recommends nothing: no measured trial")
    global_batch = (rec.get("global_batch") or {}).get("tokens") or _from_knobs(rec)
    known = best_known(landscape, global_batch, headroom)
    ours = float(rec["tokens_per_s"])
    known_tps = float(known["result"]["tokens_per_s"]) if known else 0.0
    reference = max(ours, known_tps)
    searched = list(rec["params"])
    return {
        "study": best_view["study"],
        "global_batch": global_batch,
        "recommended": {"tokens_per_s": ours, "params": rec["params"]},
        "best_known": {
            "tokens_per_s": reference,
            "params": (
                rec["params"]
                if ours >= known_tps
                else {k: known["params"].get(k) for k in searched}  # type: ignore[index]
            ),
            "from": "this study" if ours >= known_tps else "the landscape",
        },
        "ratio": ours / reference,
        "within": ours >= (1.0 - within) * reference,
        "tolerance": within,
        "vs_expert_default": (rec.get("vs_expert_default") or {}).get("text"),
        "landscape_configs_at_this_batch": sum(
            1 for e in landscape["entries"] if _gb(e) == global_batch
        ),
        "headroom": headroom,
        "tight_excluded": sum(
            1 for e in _measured_at(landscape, global_batch) if tight(e, headroom)
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--best", type=Path, required=True, help="`autotuner best --json` output")
    ap.add_argument("--landscape", type=Path, required=True, help="the model's landscape JSON")
    ap.add_argument("--within", type=float, default=WITHIN, help="tolerance (default 0.03)")
    ap.add_argument(
        "--headroom",
        type=float,
        default=DEFAULT_HEADROOM,
        help="the share of GPU memory the tune kept free: landscape configs that break it are "
        f"not the bar (default {DEFAULT_HEADROOM:g}, the tune's; 0 counts every config)",
    )
    args = ap.parse_args(argv)
    verdict = judge(
        json.loads(args.best.read_text()),
        json.loads(args.landscape.read_text()),
        args.within,
        args.headroom,
    )
    rec, known = verdict["recommended"], verdict["best_known"]
    print(f"study {verdict['study']}, global batch {verdict['global_batch']:,} tokens")
    print(f"  recommended  {rec['tokens_per_s']:>10,.0f} tok/s  {rec['params']}")
    configs = verdict["landscape_configs_at_this_batch"]
    print(f"  best known   {known['tokens_per_s']:>10,.0f} tok/s  {known['params']}")
    print(f"               ({known['from']}; the landscape holds {configs} configs at this batch)")
    if verdict["tight_excluded"]:
        print(
            f"               ({verdict['tight_excluded']} measured there leave less than "
            f"{verdict['headroom']:.0%} of the memory free: not counted)"
        )
    print(f"  vs default   {verdict['vs_expert_default'] or 'not measured'}")
    word = "PASS" if verdict["within"] else "FAIL"
    print(f"{word}: {verdict['ratio']:.1%} of the best known (within {args.within:.0%}: needed)")
    return 0 if verdict["within"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
