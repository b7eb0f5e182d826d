"""Seeding the read benchmark: studies whose trial rows are the rows the coordinator writes.

Each trial is a real `TrialConfig` (the space's knobs for the model) and a real `TrialResult`,
stored with the columns `TrialRepo.finish` writes (`trial_repo.finished_columns`): bulk inserts
of the same rows, since 20,000 one-trial transactions would take minutes and measure nothing the
benchmark is about. The outcome of a config is a synthetic landscape shaped like a real one
(throughput up with micro-batch until an OOM, bf16/fp8 faster than fp32, checkpointing slower);
about 5% of proposals are pruned, 2% time out, and the last trials are re-measurements of the
top configs, as at the end of a real study. Then each study's live recommendation is stored by
the function the coordinator calls after each finished trial.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from sqlalchemy import insert, update

from autotuner.purpose import Purpose
from autotuner.search.objective import Objective
from autotuner.search.space import SearchSpace, load_space
from autotuner.spec import (
    FailureClass,
    Fingerprint,
    ModelSpec,
    Telemetry,
    TrialConfig,
    TrialResult,
    TrialStatus,
    canonical_params,
)
from autotuner.storage.models import StudyStatus, Trial, TrialState, global_batch_tokens
from autotuner.storage.session import Database
from autotuner.study.coordinator import create_study
from autotuner.study.live import store_live_best

H200 = Fingerprint(
    device_type="cuda",
    device_name="NVIDIA H200",
    device_count=1,
    compute_capability="9.0",
    memory_total_gib=139.8,
    driver="570.86",
    cuda="12.8",
    torch="2.9.0",
    python="3.12",
    hostname="bench",
)
SPEED = {"bf16": 1.8, "fp16": 1.75, "fp8-tensorwise": 2.3, "fp8-rowwise": 2.2, "tf32": 1.3}
BATCH = 500  # rows per INSERT


def _result(params: dict[str, Any], config: TrialConfig, rng: random.Random) -> TrialResult:
    """What a config measures in the synthetic landscape."""
    mb = int(params["micro_batch_size"])
    precision = params["precision"]
    ckpt = {"none": 1.0, "selective": 0.6, "full": 0.35}[params["checkpointing"]]
    mem = 1.5 + mb * (0.4 if precision != "fp32" else 0.8) * ckpt
    if mem > 139.8:
        return TrialResult.failure(
            FailureClass.OOM,
            f"CUDA out of memory. Tried to allocate {mem - 139.8:.2f} GiB",
            required_mem_gib=mem,
            memory_limit_gib=139.8,
            wall_s=rng.uniform(8, 20),
        )
    tps = 600_000 * (mb / (mb + 16)) * SPEED.get(precision, 1.0)
    tps *= 1.25 if params["compile_mode"] != "none" else 1.0
    tps *= {"none": 1.0, "selective": 0.85, "full": 0.72}[params["checkpointing"]]
    tps *= rng.uniform(0.97, 1.03)
    spread = rng.uniform(0.001, 0.01)
    repeats = [tps * (1 - spread), tps, tps * (1 + spread)]
    return TrialResult(
        status=TrialStatus.OK,
        tokens_per_s=tps,
        tokens_per_s_min=repeats[0],
        tokens_per_s_max=repeats[-1],
        tokens_per_s_per_gpu=tps,
        repeat_tokens_per_s=repeats,
        tokens_per_step=mb * config.knobs.grad_accum * config.model.seq_len,
        steps_per_repeat=10,
        step_time_s=mb * 1024 / tps,
        mfu=tps * 6 * 124e6 / (989e12 * (2 if precision.startswith("fp8") else 1)),
        flops_per_token=6 * 124e6,
        flops_convention="6N + attention",
        peak_flops=989e12 * (2 if precision.startswith("fp8") else 1),
        peak_flops_source="table: H200 SXM dense bf16",
        peak_mem_gib=mem,
        peak_reserved_gib=mem * 1.1,
        memory_kind="cuda",
        memory_limit_gib=139.8,
        first_step_s=rng.uniform(0.5, 3),
        compile_s=rng.uniform(15, 40) if params["compile_mode"] != "none" else None,
        warmup_steps=3,
        warmup_s=rng.uniform(1, 5),
        build_s=rng.uniform(1, 3),
        wall_s=rng.uniform(20, 90),
        loss_first=10.9,
        loss_last=rng.uniform(7.0, 9.0),
        param_count=124_000_000,
        fingerprint=H200,
        telemetry=Telemetry(
            samples=40,
            sm_util_mean_pct=rng.uniform(70, 99),
            mem_util_mean_pct=rng.uniform(30, 70),
            power_mean_w=rng.uniform(400, 690),
            energy_j=rng.uniform(5_000, 30_000),
            sm_clock_mean_mhz=1_980,
            sm_clock_max_mhz=1_980,
            temperature_max_c=rng.uniform(50, 75),
        ),
    )


def _row(
    study_id: str,
    number: int,
    params: dict[str, Any],
    config: TrialConfig,
    purpose: str,
    outcome: str,
    rng: random.Random,
    start: dt.datetime,
) -> dict[str, Any]:
    """One finished trial row, with the columns the coordinator's finish writes."""
    from autotuner.storage.trial_repo import finished_columns

    stored = config.model_dump(mode="json")
    row: dict[str, Any] = {
        "study_id": study_id,
        "number": number,
        "purpose": purpose,
        "attempt": 1,
        "retry_of": None,
        "params": params,
        "config": stored,
        # Bulk inserts skip the model's validator: the column the config sets.
        "global_batch_tokens": global_batch_tokens(stored),
        "worker": f"gpu-node-{number % 8}:{4000 + number}",
        "retried": False,
        "created_at": start,
        "started_at": start,
    }
    if outcome == "pruned":
        row.update(
            finished_columns(
                TrialState.PRUNED,
                result=None,
                error_class="unsupported",
                error_message="flash attention needs fp16 or bf16 (rule: attention-precision)",
            )
        )
    elif outcome == "timeout":
        result = TrialResult.failure(FailureClass.TIMEOUT, "no result within 900 s")
        row.update(finished_columns(TrialState.FAILED, result=result))
    else:
        result = _result(params, config, rng)
        ok = result.status == TrialStatus.OK
        state = TrialState.COMPLETE if ok else TrialState.INFEASIBLE
        row.update(finished_columns(state, result=result, objective_value=result.tokens_per_s))
    row["finished_at"] = start + dt.timedelta(seconds=row.get("wall_s") or 1.0)
    row["heartbeat_at"] = row["finished_at"]
    return row


def _propose(space: SearchSpace, rng: random.Random) -> dict[str, Any]:
    params = {name: rng.choice(list(values)) for name, values in space.knobs.items()}
    if params["attention"] in ("flash", "cudnn") and params["precision"] in ("fp32", "tf32"):
        params["precision"] = "bf16"  # what the rules would prune is pruned by `outcome`
    return params


def seed_study(
    db: Database,
    *,
    trials: int,
    name: str,
    rng: random.Random,
    running: int = 0,
) -> str:
    """One study of `trials` finished trials (+ `running` still running), status running when
    some run, else completed; its live recommendation stored as the coordinator stores it."""
    model = ModelSpec.resolve({"preset": "gpt2-124m"})
    # The global batch held as the coordinator holds it when the study starts (the expert
    # default's micro-batch, 64 here, x 4 accumulation steps x seq_len): grad_accum follows.
    held = 64 * 4 * model.seq_len
    space = load_space("single-gpu").model_copy(update={"global_batch_tokens": held})
    study_id = create_study(db, model=model, space=space, name=name, max_trials=trials + running)
    knobs_cache: dict[str, TrialConfig] = {}
    start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    rows: list[dict[str, Any]] = []
    measured: list[tuple[float, dict[str, Any]]] = []
    remeasure_from = int(trials * 0.99)  # the last 1%: re-measurements of the best
    for number in range(trials + running):
        if number >= remeasure_from and measured and number < trials:
            measured.sort(key=lambda m: -m[0])
            params, purpose = measured[(number - remeasure_from) % 3][1], "remeasure"
        else:
            params, purpose = _propose(space, rng), "search" if number else Purpose.EXPERT_DEFAULT
        key = canonical_params(params)
        if key not in knobs_cache:
            knobs = space.knobs_for(params, model, 1)
            knobs_cache[key] = TrialConfig(
                study_id=study_id,
                trial_number=number,
                model=model,
                knobs=knobs,
                measure=space.measure,
                num_gpus=1,
            )
        config = knobs_cache[key].model_copy(update={"trial_number": number})
        draw = rng.random()
        outcome = "pruned" if draw < 0.05 else "timeout" if draw < 0.07 else "measured"
        if purpose != "search":
            outcome = "measured"
        row = _row(study_id, number, params, config, purpose, outcome, rng, start)
        if number >= trials:  # still running: dispatched, no result yet
            row.update(
                state=TrialState.RUNNING.value,
                result=None,
                finished_at=None,
                **{k: None for k in ("objective_value", "tokens_per_s", "peak_mem_gib")},
            )
        elif row["state"] == TrialState.COMPLETE.value:
            measured.append((row["objective_value"], params))
        rows.append(row)
        start += dt.timedelta(seconds=30)
        if len(rows) >= BATCH:
            _insert(db, rows)
    _insert(db, rows)
    store_live_best(db, study_id, Objective.TOKENS_PER_S)  # while queued, as a coordinator would
    status = StudyStatus.RUNNING if running else StudyStatus.COMPLETED
    from autotuner.storage.models import Study

    with db.session() as s:
        s.execute(
            update(Study)
            .where(Study.id == study_id)
            .values(
                status=status.value,
                started_at=dt.datetime(2026, 11, 1, tzinfo=dt.UTC),
                finished_at=None if running else start,
            )
        )
    return study_id


def _insert(db: Database, rows: list[dict[str, Any]]) -> None:
    if rows:
        with db.session() as s:
            s.execute(insert(Trial), rows)
        rows.clear()


class TrialWriter:
    """New trials of a seeded study written as a coordinator writes them: a running row in one
    transaction (`TrialRepo.create_running`), its result in another (`TrialRepo.finish`), each
    fenced by the lease `owner` holds. Each trial is a fresh search proposal of the landscape."""

    def __init__(self, db: Database, study_id: str, rng: random.Random, owner: str) -> None:
        from autotuner.storage.models import Study

        self.db, self.study_id, self.rng, self.owner = db, study_id, rng, owner
        with db.read() as s:
            study = s.get(Study, study_id)
            assert study is not None
            self.space = SearchSpace.model_validate(study.space)
            self.model = ModelSpec.model_validate(study.model_spec)

    def finish_one(self) -> int:
        """One more finished trial; returns its number."""
        from autotuner.storage.trial_repo import TrialRepo

        params = _propose(self.space, self.rng)
        knobs = self.space.knobs_for(params, self.model, 1)
        config = TrialConfig(
            study_id=self.study_id,
            trial_number=0,
            model=self.model,
            knobs=knobs,
            measure=self.space.measure,
            num_gpus=1,
        )
        stored = config.model_dump(mode="json")
        with self.db.session() as s:
            trial = TrialRepo(s).create_running(
                self.study_id, params=params, config=stored, worker="bench", owner=self.owner
            )
            number = trial.number
        result = _result(params, config, self.rng)
        ok = result.status == TrialStatus.OK
        with self.db.session() as s:
            repo = TrialRepo(s)
            row = repo.get(self.study_id, number)
            assert row is not None
            repo.finish(
                row,
                TrialState.COMPLETE if ok else TrialState.INFEASIBLE,
                result=result,
                objective_value=result.tokens_per_s if ok else None,
                owner=self.owner,
            )
        return number
