"""What the search's screen would have kept from running, in hindsight, at another headroom.

Replays each study of a database through a fresh search policy: every trial that ran is
screened first, with the cost model calibrated on the trials before it (as the study's own
policy saw them), then learned from. A trial the screen would now prune is listed with what it
spent and how it ended. The question it answers: how much of a recording's GPU time went to
configs the cost model was sure could not keep a headroom (a landscape recording ran at
headroom 0 until it kept the tune's 10%: bench/record_landscape.py), and whether any of them
would have been worth it (measured, inside the headroom).

    python bench/screen_hindsight.py bench/results/landscape_recording/qwen2.5-1.5b-instruct.db \
        --headroom 0.1

With `--carry` each study's cost model is first calibrated on the earlier studies' trials of
the same model and GPU (autotuner/search/memory_history.py), as a study now starts: run with
and without it at the headroom a recording ran with, the difference is what that evidence
saves (bench/results/memory_carry/).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotuner.executors.base import Target  # noqa: E402
from autotuner.option_defaults import DEFAULT_HEADROOM  # noqa: E402
from autotuner.purpose import SEARCH_TRIALS  # noqa: E402
from autotuner.search.headroom import StoredHeadroom, violation  # noqa: E402
from autotuner.search.memory_history import earlier_memory  # noqa: E402
from autotuner.search.objective import Objective  # noqa: E402
from autotuner.search.policy import SearchPolicy  # noqa: E402
from autotuner.search.space import parse_space  # noqa: E402
from autotuner.spec import FailureClass, Fingerprint, ModelSpec, TrialResult  # noqa: E402
from autotuner.storage.migrate import upgrade_database  # noqa: E402
from autotuner.storage.models import TrialState  # noqa: E402
from autotuner.storage.session import Database  # noqa: E402
from autotuner.storage.study_repo import StudyRepo  # noqa: E402
from autotuner.storage.trial_repo import TrialRepo  # noqa: E402


@dataclass(frozen=True)
class Kept:
    """A trial that ran and that the screen would now prune."""

    study: str
    number: int
    outcome: str  # "out of memory", "tight", "inside the headroom", or the failure class
    wall_s: float
    why: str


def hindsight(db_url: str, headroom: float, *, carry: bool = False) -> tuple[list[Kept], float]:
    """The trials the screen would now keep from running, and every trial's seconds in all
    (`db_url` at this code's schema: `main` reads a copy brought up to it). `carry`: each
    study's cost model starts from the earlier studies' evidence (its `memory_history`)."""
    db = Database(db_url)
    kept: list[Kept] = []
    total_s = 0.0
    with db.read() as s:
        studies = StudyRepo(s).list(limit=10_000)  # a recording's sessions, all of them
        rows = {st.id: TrialRepo(s).list(st.id) for st in studies}
    for study in studies:
        trials = [t for t in rows[study.id] if t.state != TrialState.PRUNED and t.result]
        results = [TrialResult.model_validate(t.result) for t in trials]
        fingerprint = next((r.fingerprint for r in results if r.fingerprint), None)
        if fingerprint is None:
            continue  # nothing ran on a known device
        options = study.options.model_copy(update={"headroom": headroom})
        model = ModelSpec.model_validate(study.model_spec)
        target = Target.from_fingerprint(Fingerprint.model_validate(fingerprint))
        policy = SearchPolicy(
            space=parse_space(study.space),
            model=model,
            target=target,
            gpus_per_trial=study.gpus_per_trial,
            objective=Objective(study.objective),
            options=options,
        )
        if carry:
            earlier = earlier_memory(
                db,
                model,
                target,
                gpus_per_trial=study.gpus_per_trial,
                before=study.created_at,
                limit=options.memory_history,
            )
            policy.cost.carry(earlier)
        for trial, result in zip(trials, results, strict=True):
            total_s += result.wall_s or 0.0
            # Only what the search proposed is screened: an end check re-runs a measured config.
            screened = trial.purpose in SEARCH_TRIALS
            knobs = trial.knobs or policy.knobs(trial.params)
            prune = policy.screen(trial.params, knobs) if screened else None
            if prune is not None:
                outcome = _outcome(result, headroom)
                kept.append(
                    Kept(study.name, trial.number, outcome, result.wall_s or 0.0, prune.message)
                )
            policy.observe_row(trial)
    return kept, total_s


def _outcome(result: TrialResult, headroom: float) -> str:
    if result.failure_class == FailureClass.OOM:
        return "out of memory"
    if result.failure_class is not None:
        return result.failure_class.value
    return "tight" if violation(result, StoredHeadroom(headroom)) > 0 else "inside the headroom"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db", type=Path, help="a study database (SQLite file)")
    ap.add_argument("--headroom", type=float, default=DEFAULT_HEADROOM, help="default: %(default)s")
    ap.add_argument(
        "--carry",
        action="store_true",
        help="calibrate each study's cost model first on the earlier studies' trials of the "
        "same model and GPU, as a study now starts",
    )
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / args.db.name  # a committed recording stays as it was recorded
        shutil.copyfile(args.db, copy)
        upgrade_database(f"sqlite:///{copy}")
        kept, total_s = hindsight(f"sqlite:///{copy}", args.headroom, carry=args.carry)
    spent = sum(k.wall_s for k in kept)
    carried = " with earlier studies' memory evidence" if args.carry else ""
    print(
        f"{args.db}: at a {args.headroom:.0%} headroom{carried} the screen would keep {len(kept)} "
        f"trial(s) from running, {spent:.0f} of {total_s:.0f} s"
    )
    for k in kept:
        print(f"  {k.study} #{k.number}: {k.outcome}, {k.wall_s:.0f} s; {k.why}")
    worth = [k for k in kept if k.outcome == "inside the headroom"]
    if worth:
        print(f"  of which {len(worth)} measured inside the headroom: lost to the screen")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
