"""Earlier studies' memory evidence: the measured peaks and out-of-memory failures of earlier
studies of the same model on the same kind of GPU, which calibrate a new study's memory model
before its first trial.

A study's memory model starts from its physical prior (costmodel/memory.py), 10-35% off until
the study's own trials calibrate it, and its doubt is wide: near the limit it can neither rule a
config out nor call a micro-batch safe. A second study of the same model on the same GPU (a
re-tune, the next session of a landscape recording) would otherwise pay again for what the
first learned. On the H100 recording of Llama-3.2-1B's landscape, two sessions ran ten configs
out of memory (388 of their 1,188 s of trial wall, three of them CUDA-graph compiles of 88-140
s); calibrated on the earlier sessions' trials, the model would have screened all ten and none
of the seven that ran (`bench/screen_hindsight.py --carry`).

What counts as the same: a study whose model spec is equal to this one's (the sequence length,
the vocabulary and the layers all change the memory), with as many GPUs a trial, and a trial
whose result's fingerprint names this target's GPU (seed_history.same_gpu). Only what a
search's own trial would teach the model: measured peaks and real (not predicted) OOMs of
search trials and seeds, not the end checks (their peaks hold an evaluation pass) or proxies
(another depth). Only trials that ended before this study was created, so a coordinator that
restarts the study reads the same evidence as the first did (its evidence replay depends on
it).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotuner.search.seed_history import same_gpu
from autotuner.spec import FailureClass, Knobs, ModelSpec, TrialResult
from autotuner.storage.earlier_reads import EarlierReads

if TYPE_CHECKING:
    from autotuner.executors.base import Target
    from autotuner.storage.session import Database

STUDIES_READ = 200  # the newest earlier studies looked at
ROWS_READ_PER_TRIAL = 4  # trial rows read for each one carried, at most


@dataclass(frozen=True)
class Carried:
    """One earlier trial's memory evidence: the knobs it ran and its result."""

    study_id: str
    number: int
    knobs: Knobs
    result: TrialResult

    @property
    def measured(self) -> bool:
        """A measured peak (else an out-of-memory failure's lower bound)."""
        return bool(self.result.peak_mem_gib and self.result.tokens_per_s)


def earlier_memory(
    db: Database,
    model: ModelSpec,
    target: Target,
    *,
    gpus_per_trial: int,
    before: dt.datetime,
    limit: int,
) -> list[Carried]:
    """At most `limit` of the newest such trials that ended before `before`, oldest first."""
    if limit <= 0 or target.device_type != "cuda":
        return []  # a CPU's peaks are the host's, and its studies keep no headroom
    with db.session() as s:
        reads = EarlierReads(s)
        studies = reads.studies(before=before, gpus_per_trial=gpus_per_trial, limit=STUDIES_READ)
        same = [sid for sid, spec in studies if _same_model(spec, model)]
        # Read with their JSON, so bounded: a trial on another GPU is passed over below.
        rows = reads.ended_measurements(same, before=before, limit=ROWS_READ_PER_TRIAL * limit)
    found: list[Carried] = []
    for study_id, number, config, stored in rows:
        carried = _evidence(study_id, number, config, stored, target)
        if carried is not None:
            found.append(carried)
            if len(found) == limit:
                break
    return found[::-1]


def carried_words(carried: list[Carried]) -> str:
    """What a study starts from, for its watcher: "the memory model starts calibrated on 27
    measured and 10 out-of-memory trials of 4 earlier studies of this model on this GPU"."""
    measured = sum(1 for c in carried if c.measured)
    ooms = len(carried) - measured
    studies = len({c.study_id for c in carried})
    parts = [f"{measured} measured"] if measured else []
    parts += [f"{ooms} out-of-memory"] if ooms else []
    return (
        f"the memory model starts calibrated on {' and '.join(parts)} "
        f"trial{'' if len(carried) == 1 else 's'} of {studies} earlier "
        f"stud{'y' if studies == 1 else 'ies'} of this model on this GPU (memory_history)"
    )


def _evidence(
    study_id: str, number: int, config: dict, stored: dict | None, target: Target
) -> Carried | None:
    """The trial's knobs and result where it teaches the memory model of this target."""
    if not stored:
        return None
    try:
        result = TrialResult.model_validate(stored)
        knobs = Knobs.model_validate((config or {})["knobs"])
    except (KeyError, TypeError, ValueError):
        return None  # stored by another version of the schema: not evidence it can read
    fingerprint = result.fingerprint.model_dump() if result.fingerprint else {}
    if not same_gpu(fingerprint, target):
        return None
    found = Carried(study_id, number, knobs, result)
    real_oom = result.failure_class == FailureClass.OOM and "predicted" not in result.notes
    return found if found.measured or real_oom else None


def _same_model(spec: dict | None, model: ModelSpec) -> bool:
    try:
        return ModelSpec.model_validate(spec or {}) == model
    except ValueError:
        return False
