"""What the trial-cost model expected of each trial of a study before it ran, against what it
took: the study's search trials replayed in order through a fresh `TrialCosts`
(autotuner/search/trial_cost.py), each observed after its estimate, as the search policy does.

    python bench/trial_cost_replay.py bench/results/hf_tune_h100_qwen2.5_blocks/tune-qwen2.5-1.5b.db

One row per trial: its compile mode, scope and precision, the expected wall, the measured wall
and compile, and whether its compile hit the study's cache (cold, warm, partial). A trial the
policy launched on an estimate far below its wall is where the estimate cost the search time.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotuner.purpose import SEARCH_TRIALS
from autotuner.search.trial_cost import TrialCosts
from autotuner.spec import TrialConfig, TrialResult


def rows(db: Path) -> list[dict]:
    """One row per search trial, each study of the database replayed on its own (a landscape
    recording holds one study a session)."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    found = connection.execute(
        "SELECT study_id, number, purpose, config, result FROM trials ORDER BY study_id, number"
    ).fetchall()
    costs: dict[str, TrialCosts] = {}
    out = []
    for study, number, purpose, config, result in found:
        if purpose not in SEARCH_TRIALS:
            continue
        cfg = TrialConfig.model_validate_json(config)
        study_costs = costs.setdefault(study, TrialCosts(cfg.model.n_layer))
        knobs = cfg.knobs
        r = TrialResult.model_validate_json(result) if result else None
        out.append(
            {
                "study": study,
                "trial": number,
                "kind": f"{knobs.compile_mode.value} {knobs.compile_scope.value} "
                f"{knobs.precision.value}",
                "expected_s": study_costs.expected_s(knobs),
                "wall_s": r.wall_s if r else None,
                "compile_s": r.compile_s if r else None,
                "cache": r.compile_cache if r else None,
            }
        )
        if r is not None:
            study_costs.observe(knobs, r)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db", type=Path, help="a study's SQLite database (a tune's)")
    args = parser.parse_args()
    header = f"{'#':>3}  {'kind':<42}{'expected s':>11}{'wall s':>9}{'compile s':>10}  cache"
    study = None
    for row in rows(args.db):
        if row["study"] != study:
            study = row["study"]
            print(f"study {study}\n{header}")
        wall = f"{row['wall_s']:.1f}" if row["wall_s"] else "-"
        comp = f"{row['compile_s']:.1f}" if row["compile_s"] else "-"
        print(
            f"{row['trial']:>3}  {row['kind']:<42}{row['expected_s']:>11.1f}{wall:>9}{comp:>10}"
            f"  {row['cache'] or '-'}"
        )


if __name__ == "__main__":
    main()
