"""What earlier studies' memory evidence (autotuner/search/memory_history.py) would have saved
the studies of a recorded database: each study's trials replayed in order through two search
policies of its own space and options, one that learns from the study's trials alone and one
calibrated first on the earlier studies' trials of the same model and GPU, as a study now is.

    python bench/memory_carry_replay.py bench/results/landscape_recording/llama-3.2-1b.db

Before each trial that ran, both policies' screens are asked whether they would have launched
it. Printed per study: the trials that ran out of memory, the wall they took and how much of it
each screen would have saved (pruned as predicted out of memory or as sure to break the
headroom); and the measured configs each screen would have pruned (a config pruned by mistake
is lost to the search: the cost of carrying evidence, if any; one whose measured peak broke the
headroom anyway is marked so, as no candidate was lost). The ratio is of the same
trials, replayed in the same run. The database is copied and migrated in a temporary folder:
the recording is only read.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotuner.executors.base import Target
from autotuner.purpose import END_CHECKS
from autotuner.search.headroom import violation
from autotuner.search.memory_history import earlier_memory
from autotuner.search.objective import Objective
from autotuner.search.policy import SearchPolicy
from autotuner.search.space import SearchSpace
from autotuner.spec import FailureClass, ModelSpec, TrialResult
from autotuner.storage.models import Study, Trial, TrialState
from autotuner.storage.session import Database, upgrade_database
from autotuner.storage.trial_repo import TrialRepo

MEMORY_PRUNES = ("oom", "headroom")


@dataclass
class Tally:
    """One policy's verdicts over a study's trials."""

    oom_screened: int = 0
    oom_wall_saved_s: float = 0.0
    measured_pruned: list[str] = field(default_factory=list)


def replay_study(db: Database, study: Study, trials: list[Trial]) -> dict | None:
    """Both policies' verdicts on `study`'s trials; None where no trial ran on a GPU."""
    results = [TrialResult.model_validate(t.result) for t in trials if t.result]
    fingerprint = next((r.fingerprint for r in results if r.fingerprint), None)
    if fingerprint is None or fingerprint.device_type != "cuda":
        return None
    target = Target.from_fingerprint(fingerprint)
    model = ModelSpec.model_validate(study.model_spec)

    def policy() -> SearchPolicy:
        return SearchPolicy(
            space=SearchSpace.model_validate(study.space),
            model=model,
            target=target,
            gpus_per_trial=study.gpus_per_trial,
            objective=Objective(study.objective),
            options=study.options,
        )

    alone, carried = policy(), policy()
    carried.cost.carry(
        earlier_memory(
            db,
            model,
            target,
            gpus_per_trial=study.gpus_per_trial,
            before=study.created_at,
            limit=study.options.memory_history,
        )
    )
    tallies = {"alone": Tally(), "carried": Tally()}
    ooms, oom_wall = 0, 0.0
    for t in trials:
        if t.state == TrialState.PRUNED or not t.result or t.purpose in END_CHECKS:
            continue
        result = TrialResult.model_validate(t.result)
        oom = result.failure_class == FailureClass.OOM
        if oom:
            ooms, oom_wall = ooms + 1, oom_wall + (t.wall_s or 0.0)
        for name, p in (("alone", alone), ("carried", carried)):
            prune = p.screen(t.params, p.knobs(t.params))
            memory = prune is not None and prune.error_class in MEMORY_PRUNES
            tally = tallies[name]
            if memory and oom:
                tally.oom_screened += 1
                tally.oom_wall_saved_s += t.wall_s or 0.0
            elif memory and result.tokens_per_s:
                # One whose measured peak broke the headroom anyway was no candidate.
                broke = violation(result, study.options) > 0
                tally.measured_pruned.append(
                    f"#{t.number}{' (broke the headroom)' if broke else ''}"
                )
            p.observe_row(t)
    return {
        "study": study.name,
        "carried_trials": len(carried.cost.carried),
        "ooms": ooms,
        "oom_wall_s": round(oom_wall, 1),
        **{
            name: {
                "oom_screened": tally.oom_screened,
                "oom_wall_saved_s": round(tally.oom_wall_saved_s, 1),
                "measured_pruned": tally.measured_pruned,
            }
            for name, tally in tallies.items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db", type=Path, help="an autotuner SQLite database (a recording, a tune)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "replay.db"
        shutil.copy(args.db, copy)
        url = f"sqlite:///{copy}"
        upgrade_database(url)
        db = Database(url)
        with db.session() as s:
            studies = s.query(Study).order_by(Study.created_at).all()
            s.expunge_all()
        rows = []
        for study in studies:
            with db.session() as s:
                trials = TrialRepo(s).list(study.id)
                s.expunge_all()
            row = replay_study(db, study, trials)
            if row is not None:
                rows.append(row)
    print(f"{'study':<32} {'carried':>7} {'OOMs':>5} {'OOM wall':>9}   alone / carried")
    for row in rows:
        a, c = row["alone"], row["carried"]
        print(
            f"{row['study'][:32]:<32} {row['carried_trials']:>7} {row['ooms']:>5} "
            f"{row['oom_wall_s']:>8.1f}s   screened {a['oom_screened']} / {c['oom_screened']}, "
            f"saved {a['oom_wall_saved_s']:.1f} / {c['oom_wall_saved_s']:.1f} s, "
            f"measured pruned {a['measured_pruned'] or '-'} / {c['measured_pruned'] or '-'}"
        )
    if args.json:
        args.json.write_text(json.dumps({"db": str(args.db), "studies": rows}, indent=1) + "\n")
    wall = sum(r["oom_wall_s"] for r in rows)
    alone = sum(r["alone"]["oom_wall_saved_s"] for r in rows)
    carried = sum(r["carried"]["oom_wall_saved_s"] for r in rows)
    if wall:
        print(
            f"OOM wall {wall:.1f} s: screened alone {alone:.1f} s ({alone / wall:.0%}), "
            f"with earlier studies' evidence {carried:.1f} s ({carried / wall:.0%})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
