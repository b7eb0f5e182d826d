"""A study's trials as the API, the dashboard and the CLI read them: pages of the trial list,
queried and sorted tables, the charts' rows, and one trial's detail. Each function is one read on
a `Database` returning the `autotuner.study.views` JSON shapes, as study/operations.py's do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotuner.study.operations import NotFound, find_study, stored_recommendation, tight_fastest

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy.orm import Session

    from autotuner.options import StudyOptions
    from autotuner.search.headroom import StoredHeadroom
    from autotuner.storage.models import Study
    from autotuner.storage.session import Database


def list_trials(
    db: Database, ref: str, *, after: int | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """A study's trials in number order; `after` and `limit` page through them (keyset: the
    trials numbered above `after`, at most `limit`), reading only those rows."""
    from autotuner.storage.trial_list import list_rows
    from autotuner.study import trial_list

    with db.reading() as c:
        study_id, options = _study_options(c, ref)
        rows = list_rows(c, study_id, after=after, limit=limit)
    return trial_list.views(rows, options)


def last_trials(
    db: Database, ref: str, last: int | None
) -> tuple[dict[str, Any], int, list[dict[str, Any]]]:
    """What `autotuner trials` shows, in one transaction: the study `ref` names (its id and
    status), how many trials it has, and its `last` newest trials in number order (None:
    every one). No study view is built: its tallies by state and its imports were a tenth of
    a cold `trials` on Postgres."""
    from autotuner.search.headroom import StoredHeadroom
    from autotuner.storage import reads
    from autotuner.storage.trial_list import list_rows, query_count
    from autotuner.study import trial_list
    from autotuner.study.newest import after_last

    columns = reads.studies.c
    with db.reading() as c:
        study = reads.require_study(
            reads.rows_of(c), ref, (columns.id, columns.status, reads.STORED_HEADROOM)
        )
        total = query_count(c, study.id, conditions=())
        rows = list_rows(c, study.id, after=after_last(total, last), limit=None)
    views = trial_list.views(rows, StoredHeadroom.of(study.headroom))
    return {"id": study.id, "status": study.status}, total, views


def trial_page_json(
    db: Database, ref: str, *, after: int | None = None, limit: int | None = None
) -> bytes:
    """`list_trials` as its JSON array, encoded once (what the API and the dashboard send)."""
    from autotuner.storage.trial_list import list_rows
    from autotuner.study import trial_list

    with db.reading() as c:
        study_id, options = _study_options(c, ref)
        rows = list_rows(c, study_id, after=after, limit=limit)
    return trial_list.page_json(rows, options)


# Trials one page holds when the caller gives no limit: a call never reads a whole study
# (50,000 trials were 42 MB and 2.2 s in one answer); the rest follow with `after`.
PAGE_SIZE = 500


def trial_page(
    db: Database, ref: str, *, after: int | None = None, limit: int | None = None
) -> tuple[bytes, int | None]:
    """A page of `list_trials` (at most `limit`, PAGE_SIZE by default) as its JSON array,
    encoded once (what the API sends), and the `after` of the next page: the last number of
    this one where more trials follow it, else None. One statement: a row past the page says
    whether there are more."""
    from autotuner.storage.trial_list import list_rows
    from autotuner.study import trial_list

    size = PAGE_SIZE if limit is None else limit
    with db.reading() as c:
        study_id, options = _study_options(c, ref)
        rows = list_rows(c, study_id, after=after, limit=size + 1)
    more = len(rows) > size
    rows = rows[:size]
    return trial_list.page_json(rows, options), rows[-1][0] if more else None


def _study_options(c: Any, ref: str) -> tuple[str, StoredHeadroom]:
    """The study `ref` names: its id and headroom, all a trial list needs of it (on a Core
    connection: storage/reads.py)."""
    from autotuner.search.headroom import StoredHeadroom
    from autotuner.storage import reads

    study = reads.require_study(reads.rows_of(c), ref, (reads.studies.c.id, reads.STORED_HEADROOM))
    return study.id, StoredHeadroom.of(study.headroom)


def knob_domains(study: Study) -> dict[str, Any]:
    """The study's searched knobs and their domains, as its stored space has them."""
    return dict((study.space or {}).get("knobs", {}))


def query_trials(
    db: Database,
    ref: str,
    params: list[tuple[str, str]],
    *,
    offset: int = 0,
    limit: int | None = None,
) -> dict[str, Any]:
    """The trials the query `params` select (trial_query.parse_trial_query: sort, order,
    state, error_class, knob=value), `limit` of them from `offset`, and how many match in all:
    two statements, whatever the study's size (the filter and the order run in SQL)."""
    from autotuner.storage import trial_list as reads
    from autotuner.storage.study_repo import StudyRepo
    from autotuner.study import trial_list
    from autotuner.study.trial_query import conditions, order_by, parse_trial_query

    with db.read() as s:
        study = StudyRepo(s).require(ref)
        domains = knob_domains(study)
        q = parse_trial_query(params, domains)
        where = conditions(q, domains)
        found = reads.query_rows(
            s, study.id, conditions=where, order_by=order_by(q, domains), offset=offset, limit=limit
        )
        rows = trial_list.views(found, study.options)
        total = len(rows)
        if offset or (limit is not None and total == limit):  # a page of more: count them
            total = reads.query_count(s, study.id, conditions=where)
    return {"total": total, "trials": rows, "knobs": list(domains)}


POLL_LIMIT = 1000  # trials one page poll returns at most (a tab woken after a long sleep)


def chart_rows(
    s: Session, study_id: str, knobs: list[str], options: StudyOptions | None, low: int = 0
) -> list[dict[str, Any]]:
    """Every trial's (numbered `low` or above) number, state, throughput, peak memory and knob
    values (as text, taken out of the params in SQL): what the charts draw, without decoding
    a JSON record; and whether the recommendation may stand on it (`candidate`: not tight on
    memory, not stopped after its first repeats), so that the best-so-far line is the header's
    best so far. The numerics check's parity runs show no tokens/s (they measure no
    throughput); one that failed still marks its candidate's values as failed."""
    from autotuner.storage import trial_list as stored
    from autotuner.study.columns import MEMORY_FIELDS, MemoryRecord
    from autotuner.study.trial_list import NOT_MEASUREMENTS, memory_judgement

    shown = ("number", "state", "tokens_per_s", "purpose", "stopped_early", *MEMORY_FIELDS)
    rows = stored.chart_rows(s, study_id, shown, knobs, low)
    out = []
    split = len(shown)
    for row in rows:
        record = MemoryRecord(*row[5:split])
        _, tight = memory_judgement(row[1], record, options)
        out.append(
            {
                "number": row[0],
                "state": row[1],
                "tokens_per_s": None if row[3] in NOT_MEASUREMENTS else row[2],
                "purpose": row[3],
                "peak_mem_gib": record.peak_mem_gib,
                "candidate": not tight and not row[4],
                "params": {k: v for k, v in zip(knobs, row[split:], strict=True) if v is not None},
            }
        )
    return out


def get_study_detail(
    db: Database,
    ref: str,
    *,
    after: int | None = None,
    last: int = 100,
    charts_at: int | None = None,
    charts: Callable[[Session, Study, list[str]], Any] | None = None,
) -> dict[str, Any]:
    """What the dashboard's study page shows, read in one transaction: the study, its knob
    names, its best, a page of trials (the `last` newest, or with `after` the ones numbered
    above it: what a poll asks for) and the chart columns of every trial (`chart_rows`),
    unless `charts_at` says the caller's charts already show every finished trial (None).
    `charts(session, study, knobs)`, where given, is read in the same transaction instead of
    the chart columns, as `charts` (the dashboard's kept charts: dashboard/charts_kept.py)."""
    from autotuner.storage.trial_list import list_rows
    from autotuner.study import trial_list
    from autotuner.study.views import best_view, study_view

    with db.read() as s:
        study, summary = find_study(s, ref)
        domains = knob_domains(study)
        knobs = list(domains)
        first = after if after is not None else summary.total - last - 1
        trials = list_rows(s, study.id, after=first, limit=POLL_LIMIT)
        detail: dict[str, Any] = {
            "study": study_view(study, summary, space_name=study.space.get("name")),
            "knobs": knobs,
            "knob_domains": domains,
            "trials": trial_list.views(trials, study.options),
        }
        if charts_at == summary.finished:
            detail["chart_rows"] = detail["charts"] = None
        elif charts is not None:
            detail["chart_rows"], detail["charts"] = None, charts(s, study, knobs)
        else:
            detail["chart_rows"] = chart_rows(s, study.id, knobs, study.options)
            detail["charts"] = None
        rec = stored_recommendation(s, study, summary)
        tight = tight_fastest(s, study, rec, study.options)
        detail["best"] = best_view(study, summary, rec, tight_fastest=tight)
    return detail


def get_trial(db: Database, ref: str, number: int) -> dict[str, Any]:
    return get_trial_detail(db, ref, number)["trial"]


def get_trial_detail(db: Database, ref: str, number: int) -> dict[str, Any]:
    """One trial in full with its study's id and name, and what the study's models predicted
    for it before it ran (views.predictions_view)."""
    from autotuner.search.numerics_entry import PARITY_PURPOSES, page_view
    from autotuner.storage.study_repo import StudyRepo
    from autotuner.storage.trial_repo import TrialRepo
    from autotuner.study.views import predictions_view, trial_view

    with db.read() as s:
        study = StudyRepo(s).require(ref)
        trial = TrialRepo(s).get(study.id, number)
        if trial is None:
            count = TrialRepo(s).count(study.id)
            raise NotFound(
                f"study {study.id} has no trial #{number} (it has {count} trial(s), "
                f"numbered from 0); list them with `autotuner trials {study.id}`"
            )
        numerics = None
        if (trial.result or {}).get("loss_curve"):  # a parity run: its check beside its partner
            # The rows its partner may be among: the numerics check's runs and headroom checks.
            related = TrialRepo(s).list(study.id, purposes=PARITY_PURPOSES)
            numerics = page_view(trial, related)
        return {
            "study_id": study.id,
            "study_name": study.name,
            "trial": trial_view(trial, full=True, options=study.options),
            "predictions": predictions_view(study.recommendation, number),
            "numerics": numerics,
        }
