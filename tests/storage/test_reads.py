"""storage/reads.py: the reads a study view, a best view and a trial list make on the Core
tables answer as the ORM repositories do (they are the same queries), in a read-only
transaction, and a process that makes only them imports no ORM."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest
from sqlalchemy import exc, insert

from autotuner.storage import Database, StudyNotFound, StudyRepo, TrialRepo, TrialState, reads
from autotuner.storage.tables import studies
from tests.storage.test_repository import MakeStudy, _result, _run


def _rows(db: Database, key: str) -> tuple[str | None, list[str]]:
    with db.reading() as c:
        found, candidates = reads.find_study(reads.rows_of(c), key)
    return (found.id if found is not None else None), [s.id for s in candidates]


def _orm(db: Database, key: str) -> tuple[str | None, list[str]]:
    with db.read() as s:
        found, candidates = StudyRepo(s)._lookup(key)
    return (found.id if found is not None else None), [s.id for s in candidates]


def test_a_study_is_found_as_the_repository_finds_it(db: Database, make_study: MakeStudy) -> None:
    first, second = make_study(name="same"), make_study(name="same")
    other = make_study(name="other")
    keys = [first.id, second.id, other.id[3:9], "same", "other", "st-", "nope", " ", first.id[:5]]
    for key in keys:
        assert _rows(db, key) == _orm(db, key), key
    assert _rows(db, "same")[0] == second.id  # the newest of a name
    with db.reading() as c:
        row = reads.require_study(reads.rows_of(c), other.id)
        assert row.name == "other" and row.space == {"micro_batch_size": [1, 2, 4]}
        assert row.created_at.tzinfo is dt.UTC  # aware UTC, as the ORM's
        with pytest.raises(StudyNotFound, match="autotuner status"):
            reads.require_study(reads.rows_of(c), "nope")
        assert reads.study_options(c, other.id).headroom == other.options.headroom


def test_the_page_and_the_tallies_are_the_lists(db: Database, make_study: MakeStudy) -> None:
    study, empty = make_study(), make_study(name="empty")
    trials = [_run(db, study.id) for _ in range(4)]
    with db.session() as s:
        repo = TrialRepo(s)
        repo.finish(trials[0], TrialState.COMPLETE, result=_result(100.0), objective_value=100.0)
        repo.finish(trials[1], TrialState.COMPLETE, result=_result(300.0), objective_value=300.0)
        repo.finish(trials[2], TrialState.FAILED, error_class="crash", error_message="stopped: x")
    with db.reading() as c:
        page = reads.study_page(c, limit=10)
        assert [(row.id, name) for row, name, _ in page] == [(empty.id, None), (study.id, None)]
        assert "space" not in page[0][0]._mapping and "options" not in page[0][0]._mapping
        assert sorted(reads.summary_rows(c, [study.id, empty.id])) == [
            (study.id, "complete", 2, 2, 300.0),
            (study.id, "failed", 1, 1, None),
            (study.id, "running", 1, 1, None),
        ]
        assert reads.failed_with(c, [study.id], "stopped") == {study.id: 1}
        assert reads.failed_with(c, [study.id], "other") == {}
        best = reads.best_trial(c, study.id)
        assert best is not None and best.number == 1 and best.result["tokens_per_s"] == 300.0
        assert reads.best_trial(c, empty.id) is None


def test_reading_is_a_read_only_transaction(db: Database, make_study: MakeStudy) -> None:
    make_study()
    row = {"id": "st-new", "name": "n", "model_spec": {}, "space": {}}
    with db.reading() as c:
        if db.is_sqlite:
            # A read takes no write lock: a writer goes on beside it.
            with db.session() as s:
                repo = StudyRepo(s)
                repo.create(name="beside", model_spec={}, space={}, max_trials=1, max_minutes=None)
        else:
            with pytest.raises(exc.DBAPIError, match="read-only"):
                c.execute(insert(studies).values(**row))
    with db.read() as s:
        assert StudyRepo(s).get("st-new") is None


def test_a_process_that_reads_rows_imports_no_orm(sqlite_url: str) -> None:
    code = (
        "import sys\n"
        "from autotuner.storage.session import Database\n"
        "from autotuner.storage import reads\n"
        f"db = Database({sqlite_url!r})\n"
        "with db.reading() as c:\n"
        "    reads.require_study(reads.rows_of(c), 'tiny')\n"
        "print(sorted(m for m in ('sqlalchemy.orm', 'pydantic', 'autotuner.storage.models')"
        " if m in sys.modules))\n"
    )
    with Database(sqlite_url).session() as s:
        StudyRepo(s).create(name="tiny", model_spec={}, space={}, max_trials=1, max_minutes=None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
