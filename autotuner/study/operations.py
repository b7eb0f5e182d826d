"""Study operations shared by the HTTP API and the CLI on a local database.

Each function is one unit of work on a `Database` and returns the `autotuner.study.views` JSON
shape, so `autotuner status --server URL` and `autotuner status --db URL` print the same thing
from the same code. Validation happens before anything is written: a rejected submit leaves no row.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from autotuner.errors import UserError
from autotuner.status import ENDED_STATUSES, StudyStatus, TrialState

# What a submit needs (specs, spaces, YAML, the exports) is imported in the functions that
# submit: the CLI's reads import this module on every call, and read none of it.
if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqlalchemy.orm import Session

    from autotuner.executors.base import Target
    from autotuner.options import StudyOptions
    from autotuner.search.space import SearchSpace
    from autotuner.spec import DataFile, ModelSpec
    from autotuner.storage.models import Study
    from autotuner.storage.session import Database
    from autotuner.study.data_access import DataAccess
    from autotuner.study.factory_access import FactoryAccess
    from autotuner.study.request import StudyRequest
    from autotuner.study.study_query import StudyQuery
    from autotuner.study.views import TrialSummary


# The state `trial_counts` counts a failed trial its study's cancel stopped under (as the trial
# tables label it: study/labels.py).
CANCELLED = "cancelled"


class NotFound(LookupError):
    """A trial (or other object) the caller named does not exist; the message says so."""


class Conflict(UserError):
    """The request is valid but the study's state does not allow it (e.g. cancel a finished one)."""


# --------------------------------------------------------------------------- submit


def resolve_model(value: dict[str, Any] | str) -> ModelSpec:
    from autotuner.inputs import parse_model_spec

    if isinstance(value, str):
        return parse_model_spec({"preset": value}, source="model")
    return parse_model_spec(value, source="model")


def resolve_space(value: dict[str, Any] | str) -> SearchSpace:
    """An inline space mapping, or a built-in space by name (never a file path: this runs on
    the server, where a path would read the server's files)."""
    from autotuner.search.space import SpaceError, builtin_space_names, load_space, spaces_dir

    if isinstance(value, dict):
        from autotuner.search.space import parse_space

        return parse_space(value, source="space")
    names = builtin_space_names()
    if value not in names:
        raise SpaceError(
            f"space {value!r} is not a built-in space (built-ins: {', '.join(names)}); "
            "pick one of those or send the space inline as a mapping"
        )
    return load_space(str(spaces_dir() / f"{value}.yaml"))


def _with_global_batch(space: SearchSpace, tokens: int, model: ModelSpec, gpus: int) -> SearchSpace:
    """The space with the request's global batch, checked: it must not also search or fix
    grad_accum, and some micro-batch of the space must divide it for this model."""
    from pydantic import ValidationError

    from autotuner.inputs import describe_validation_error
    from autotuner.search.space import IntRange, SearchSpace, SpaceError

    try:
        # The user's global batch wins over one the space would take from its expert default.
        fixed = SearchSpace.model_validate(
            {
                **space.model_dump(by_alias=True),
                "global_batch_tokens": tokens,
                "global_batch_from_expert": None,
            }
        )
    except ValidationError as exc:
        raise SpaceError(f"global_batch_tokens: {describe_validation_error(exc)}") from None
    domain = fixed.knobs.get("micro_batch_size")
    sizes = (
        list(range(domain.low, domain.high + 1, domain.step))
        if isinstance(domain, IntRange)
        else [int(v) for v in (domain or [fixed.fixed.get("micro_batch_size", 1)])]
    )
    per_sequence = model.seq_len * max(gpus, 1)
    if not any(tokens % (mb * per_sequence) == 0 for mb in sizes):
        raise SpaceError(
            f"global_batch_tokens {tokens:,}: no micro_batch_size of the space "
            f"({', '.join(map(str, sizes[:12]))}) x seq_len {model.seq_len} x {max(gpus, 1)} "
            f"GPU(s) divides it; use a multiple of {sizes[0] * per_sequence:,} tokens"
        )
    return fixed


def _with_data(space: SearchSpace, data: DataFile) -> SearchSpace:
    """The space measuring on the request's data (MeasureSettings.data; data_source `file`)."""
    from autotuner.spec import MeasureSettings

    measure = space.measure.model_dump(exclude={"data_source"})
    measure["data"] = data.model_dump()
    return space.model_copy(update={"measure": MeasureSettings.model_validate(measure)})


def validate_request(
    req: StudyRequest,
    target: Target | None = None,
    *,
    data_access: DataAccess,
    factory_access: FactoryAccess | None = None,
) -> tuple[ModelSpec, SearchSpace]:
    """Everything a study needs, checked before anything is written. `data_access` says
    which data paths may be read: any for the local CLI, the operator's directories for the
    service (a required argument, so no caller gets the permissive one by default);
    `factory_access` which model code may run (none unless the caller says)."""
    from pydantic import ValidationError

    from autotuner.inputs import describe_validation_error
    from autotuner.search.space import SpaceError
    from autotuner.study.factory_access import FactoryAccess

    factories = factory_access if factory_access is not None else FactoryAccess.nowhere()
    model = factories.check(resolve_model(req.model))
    space = resolve_space(req.space)
    if req.global_batch_tokens is not None:
        space = _with_global_batch(space, req.global_batch_tokens, model, req.gpus_per_trial)
    if req.data is not None:
        space = _with_data(space, req.data)
    if space.measure.data is not None:
        from autotuner.datafiles import inspect

        # Before anything opens the path: whether it may be read decides what may be said.
        data_access.check_file(space.measure.data)
        inspect(space.measure.data, model)  # the file, its dtype, length and ids: DataError
    try:
        space.knobs_for(space.seed_params(), model, req.gpus_per_trial)
    except ValidationError as exc:
        raise SpaceError(
            f"space {space.name}: its default config does not build for this model: "
            f"{describe_validation_error(exc)}"
        ) from None
    if target is not None and (why := gpus_missing_for(req.gpus_per_trial, target)):
        raise UserError(why)
    return model, space


def gpus_missing_for(gpus_per_trial: int, target: Target) -> str | None:
    """Why a trial on `gpus_per_trial` GPUs cannot run on `target` as asked, or None. On a
    cluster with no GPU a trial is one CPU process whatever it asks (issue 42: `--gpus 4`
    there ran one and stored 4), so more than one is refused there too."""
    have = max(target.gpus_total, 0) if target.device_type == "cuda" else 0
    if gpus_per_trial <= max(have, 1):
        return None
    cluster = f"{have} GPU(s)" if have else "no GPU (its trials run on the CPU, one process)"
    fix = f"ask for at most {have} per trial" if have else "drop gpus_per_trial (1 on the CPU)"
    return (
        f"gpus_per_trial={gpus_per_trial} but the cluster has {cluster}; {fix}, or add GPU workers"
    )


def submit_study(
    db: Database,
    req: StudyRequest,
    target: Target | None = None,
    *,
    data_access: DataAccess,
    factory_access: FactoryAccess | None = None,
) -> dict[str, Any]:
    """Validate and record a new queued study; a coordinator picks it up."""
    view, _ = submit_once(
        db, req, target, data_access=data_access, factory_access=factory_access, key=None
    )
    return view


def submit_once(
    db: Database,
    req: StudyRequest,
    target: Target | None = None,
    *,
    data_access: DataAccess,
    factory_access: FactoryAccess | None = None,
    key: str | None,
) -> tuple[dict[str, Any], bool]:
    """`submit_study` with an idempotency key (study/submit_keys.py): (the study, True) when
    this call created it; (the study the key created before, False) on a retry."""
    from sqlalchemy.exc import IntegrityError

    from autotuner.study import submit_keys

    req_digest = None
    if key is not None:
        submit_keys.check_key(key)
        req_digest = submit_keys.digest(req)
        if (found := submit_keys.find(db, key, req_digest)) is not None:
            return get_study(db, found), False
    model, space = validate_request(
        req, target, data_access=data_access, factory_access=factory_access
    )
    device = target.device_type if target is not None else None
    try:
        study_id = create_requested(
            db, req, model, space, device_type=device, key=key, key_digest=req_digest
        )
    except IntegrityError:
        # Another request with this key committed first: its study is the answer.
        if key is None or req_digest is None:
            raise
        found = submit_keys.find(db, key, req_digest)
        if found is None:
            raise
        return get_study(db, found), False
    return get_study(db, study_id), True


def create_requested(
    db: Database,
    req: StudyRequest,
    model: ModelSpec,
    space: SearchSpace,
    *,
    device_type: str | None = None,
    key: str | None = None,
    key_digest: str | None = None,
) -> str:
    """Record the queued study a validated request asks for; returns its id. `device_type`:
    what the cluster runs trials on, when the caller knows its target; `key`: the submit's
    idempotency key, stored with the study (with `key_digest`, its request's fingerprint)."""
    from autotuner.study.coordinator import create_study

    return create_study(
        db,
        model=model,
        space=space,
        name=req.name,
        objective=req.objective,
        max_trials=req.max_trials,
        max_minutes=req.max_minutes,
        gpus_per_trial=req.gpus_per_trial,
        sampler=req.sampler,
        seed=req.seed,
        options=req.options,
        device_type=device_type,
        submit_key=key,
        submit_digest=key_digest,
    )


# --------------------------------------------------------------------------- read


def summaries(s: Any, study_ids: list[str]) -> dict[str, TrialSummary]:
    """Each study's trial counts per state, launched trials and best value: one grouped
    statement, however many studies and trials (SQL aggregates; no trial row is loaded), and
    one over the failed trials of those with any, for those its cancel stopped (`cancelled`).
    `s`: a session or a Core connection (storage/reads.py)."""
    from autotuner.storage import reads
    from autotuner.study.labels import CANCELLED_MESSAGE
    from autotuner.study.views import TrialSummary

    out = {study_id: TrialSummary() for study_id in study_ids}
    for study_id, state, n, first, best in reads.summary_rows(s, study_ids):
        summary = out[study_id]
        summary.counts[state] = n
        if state != TrialState.PRUNED.value:
            summary.launched += first
        if best is not None and (summary.best_value is None or best > summary.best_value):
            summary.best_value = best
    failed = [i for i in study_ids if out[i].counts.get(TrialState.FAILED.value)]
    for study_id, n in reads.failed_with(s, failed, CANCELLED_MESSAGE).items():
        # Counted as the trial tables label them (labels.trial_label): a trial the study's
        # cancel stopped is `cancelled`, not a failure.
        counts = out[study_id].counts
        counts[TrialState.FAILED.value] -= n
        if not counts[TrialState.FAILED.value]:
            del counts[TrialState.FAILED.value]
        counts[CANCELLED] = n
    return out


def study_summaries(s: Any, studies: Sequence[Any]) -> dict[str, TrialSummary]:
    """`summaries` of these studies (ORM objects or Core rows: their `id` and
    `trials_version`) as read with their rows. In a read-only transaction they come from the
    per-version cache (study/versioned.py) where this process derived them at the same trials
    version; a transaction that writes reads them fresh (its own writes are not committed:
    nothing of them may be kept)."""
    from autotuner.storage.session import READ_ONLY
    from autotuner.study.versioned import SUMMARIES, bind_of

    if not bind_of(s).get_execution_options().get(READ_ONLY):
        return summaries(s, [st.id for st in studies])
    return SUMMARIES.get_many(s, studies, lambda ids: summaries(s, ids))


def list_studies(
    db: Database,
    *,
    status: str | None = None,
    limit: int = 100,
    query: StudyQuery | None = None,
) -> list[dict]:
    """Studies newest first with their trial counts, progress and best value: two statements
    however many studies (the summaries are one grouped query, not a query per study), reading
    only the columns the list shows. `query`: the list's filters (study/study_query.py),
    applied in the first statement."""
    from autotuner.storage import reads
    from autotuner.study.views import study_view

    if status is not None and status not in {s.value for s in StudyStatus}:
        raise UserError(
            f"status {status!r}: choose one of {', '.join(s.value for s in StudyStatus)}"
        )
    conditions = []
    if query is not None:  # the dashboard's filters (their module imports the spec)
        from autotuner.study import study_query

        conditions = study_query.conditions(query)
    with db.reading() as c:
        rows = reads.study_page(c, limit=limit, status=status, conditions=conditions)
        sums = study_summaries(c, [study for study, _, _ in rows])
        return [
            study_view(st, sums[st.id], space_name=name, recommended_value=value)
            for st, name, value in rows
        ]


def find_study(s: Session, ref: str) -> tuple[Study, TrialSummary]:
    """The study `ref` names, as an ORM object, and its summary."""
    from autotuner.storage.study_repo import StudyRepo

    study = StudyRepo(s).require(ref)
    return study, study_summaries(s, [study])[study.id]


def find_study_row(c: Any, ref: str) -> tuple[Any, TrialSummary]:
    """`find_study` as a Core row of the study's columns but its options (storage/reads.py),
    on a connection: what a study view and a stored best read, no ORM imported."""
    from autotuner.storage import reads

    study = reads.require_study(reads.rows_of(c), ref)
    return study, study_summaries(c, [study])[study.id]


def get_study(db: Database, ref: str) -> dict[str, Any]:
    from autotuner.study.views import study_view

    with db.reading() as c:
        study, summary = find_study_row(c, ref)
        return study_view(study, summary, space_name=study.space.get("name"))


def stored_recommendation(s: Session, study: Study, summary: TrialSummary) -> dict[str, Any] | None:
    """The stored recommendation. A study last written before recommendations were stored
    live (a running one, right after the upgrade) has none yet: computed once here."""
    rec = study.recommendation
    if rec is None and summary.counts.get(TrialState.COMPLETE.value):
        # Imported here: a read of a stored recommendation loads no search code.
        from autotuner.search.objective import Objective
        from autotuner.study.live import live_best_in

        rec = live_best_in(s, study.id, Objective(study.objective), study.options)
    return rec


def get_best(db: Database, ref: str, *, headroom: float | None = None) -> dict[str, Any]:
    """The study's best view; with `headroom`, its measured trials re-judged at that memory
    headroom instead of the study's (nothing stored: `rejudged` in the answer says so)."""
    from autotuner.study.views import best_view

    with db.reading() as c:
        if headroom is None:
            study, summary = find_study_row(c, ref)
            rec = study.recommendation
            if rec is not None or not summary.counts.get(TrialState.COMPLETE.value):
                # As stored (`stored_recommendation` has nothing to compute): Core rows alone.
                tight = tight_fastest(c, study, rec, None)
                return best_view(study, summary, rec, tight_fastest=tight)
        # A re-judge, or a recommendation computed from every trial: on ORM objects, in the
        # same transaction.
        with db.session_on(c) as s:
            study, summary = find_study(s, ref)
            options = study.options
            if headroom is None:
                rec = stored_recommendation(s, study, summary)
            else:
                options = _with_headroom(study.options, headroom)
                rec = _rejudged(s, study, options)
            tight = tight_fastest(s, study, rec, options)
            return best_view(study, summary, rec, tight_fastest=tight)


def _with_headroom(options: StudyOptions, headroom: float) -> StudyOptions:
    from pydantic import ValidationError

    from autotuner.options import StudyOptions

    try:
        return StudyOptions.model_validate({**options.model_dump(), "headroom": headroom})
    except ValidationError as exc:
        raise UserError(
            f"headroom {headroom:g}: the share of GPU memory to keep free is 0 to 0.9 (0.05: 5%)"
        ) from exc


def _rejudged(s: Session, study: Study, options: StudyOptions) -> dict[str, Any] | None:
    """The recommendation from the study's measured trials at `options`' headroom. A config
    whose evaluation-and-checkpoint check never ran (only the study's own winner gets one) is
    judged on its timed peak alone, as the text says. What no headroom changes is kept per
    study version (study/recommend_cache.py): another headroom redoes only the rest."""
    from autotuner.search.objective import Objective
    from autotuner.study.recommend_cache import rejudged

    rec = rejudged(s, study, Objective(study.objective), options)
    if rec is not None:
        rec["rejudged"] = {
            "headroom": options.headroom,
            "study_headroom": study.options.headroom,
            "text": (
                f"re-judged from the measured trials at a {options.headroom:.1%} memory "
                f"headroom (the study kept {study.options.headroom:.1%}); nothing stored: the "
                "study's own recommendation is unchanged"
            ),
        }
    return rec


def tight_fastest(
    s: Any, study: Any, rec: dict[str, Any] | None, options: StudyOptions | None
) -> dict[str, Any] | None:
    """An ended study that recommends nothing although trials measured (every one left less
    memory free than its headroom: Llama 8B on one H200, 9.7% free of the 10% kept): its
    fastest measured trial, the memory it left free, and the headroom that would accept it,
    so that `best` can say which lower --headroom would accept it (`best --headroom`).
    `s`: a session or a Core connection; `options`: None for the study's own (read here,
    where needed)."""
    from types import SimpleNamespace

    from autotuner.storage import reads
    from autotuner.study.columns import memory_record
    from autotuner.study.trial_list import memory_judgement

    if rec is not None or study.status not in ENDED_STATUSES:
        return None
    row = reads.best_trial(s, study.id)
    # Its columns by name, as a Trial's (memory_record reads the result where it is loaded).
    fastest = SimpleNamespace(**row._mapping) if row is not None else None
    record = memory_record(fastest) if fastest is not None else None  # type: ignore[arg-type]
    if fastest is None or record is None:
        return None
    if options is None:
        options = reads.study_options(s, study.id)
    free, tight = memory_judgement(fastest.state, record, options)
    if not tight or free is None or free <= 0:
        return None
    return {
        "trial_number": fastest.number,
        "tokens_per_s": fastest.tokens_per_s,
        "params": fastest.params,
        "memory_free_rel": round(free, 4),
        "headroom": options.headroom,
        # The largest whole-percent headroom it keeps: floor, so the rerun accepts it.
        "headroom_accepting": math.floor(free * 100) / 100,
    }


def export_best(db: Database, ref: str, fmt: str, *, allow_partial: bool = False) -> str:
    """The best config as text in `fmt` (one of export.FORMATS). A cancelled or failed
    study's best is refused (Conflict) unless `allow_partial`, and then marked as partial."""
    from autotuner.study.export import FORMATS as EXPORT_FORMATS
    from autotuner.study.export import render
    from autotuner.study.labels import unfinished_note
    from autotuner.study.views import best_view

    if fmt not in EXPORT_FORMATS:
        raise UserError(f"format {fmt!r}: choose one of {', '.join(EXPORT_FORMATS)}")
    from autotuner.storage.trial_repo import TrialRepo

    with db.read() as s:
        study, summary = find_study(s, ref)
        view = best_view(study, summary, stored_recommendation(s, study, summary))
    rec = view["best"]
    partial = unfinished_note(view) if rec is not None else None
    if partial and not allow_partial:
        raise Conflict(
            f"{partial}; export it anyway with --allow-partial (API: allow_partial=true)"
        )
    config = None
    if rec is not None:
        with db.read() as s:
            trial = TrialRepo(s).get(study.id, rec["trial_number"])
            config = trial.config if trial is not None else None
    return render(rec, fmt, study_id=study.id, config=config, partial=partial)


# --------------------------------------------------------------------------- cancel
