"""The CLI verbs against the real service (--server) and against a local database (--db):
one code path, the same JSON either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.service.conftest import REPLAY_SPACE, TOKEN, Service, free_port

REPO = Path(__file__).resolve().parents[2]


def cli(
    *args: str, token: str | None = TOKEN, timeout: float = 120, python: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("AUTOTUNER_SERVER", "AUTOTUNER_TOKEN", "AUTOTUNER_DATABASE_URL")
    }
    if token:
        env["AUTOTUNER_TOKEN"] = token
    return subprocess.run(
        [sys.executable, *python, "-m", "autotuner.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def space_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "space.yaml"
    path.write_text(yaml.safe_dump(REPLAY_SPACE))
    return path


@pytest.fixture(scope="module")
def service(
    pg_database: str, landscape_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    log = tmp_path_factory.mktemp("cli-service") / "service.log"
    svc = Service(pg_database, log, executor=f"replay:{landscape_file}?slots=2&delay_s=0.2")
    svc.start()
    yield svc
    svc.stop()


@pytest.mark.postgres
def test_submit_watch_and_read_back_through_the_service(service: Service, space_file: Path) -> None:
    server = ["--server", service.url]
    submitted = cli("submit", "tiny", "--space", str(space_file), "--trials", "5", *server)
    assert submitted.returncode == 0, submitted.stderr
    study_id = submitted.stdout.strip()
    assert study_id.startswith("st-") and "autotuner best" in submitted.stderr

    watched = cli("best", study_id, "--watch", "--json", "--interval", "0.3", *server)
    assert watched.returncode == 0, watched.stderr
    frames = [json.loads(line) for line in watched.stdout.splitlines()]
    assert frames[-1]["status"] == "completed" and frames[-1]["best"] is not None

    by_name = json.loads(cli("status", "tiny / service-replay", "--json", *server).stdout)
    assert by_name["id"] == study_id  # a default name has a '/': looked up by name
    remote = json.loads(cli("status", study_id, "--json", *server).stdout)
    local = json.loads(cli("status", study_id, "--json", "--db", service.db_url).stdout)
    assert remote == local  # one code path behind both backends
    trials = json.loads(cli("trials", study_id, "--json", *server).stdout)
    assert sum(t["state"] != "pruned" for t in trials) == 5
    table = cli("trials", study_id, *server, python=("-X", "importtime"))
    assert table.returncode == 0 and "Trials of study" in table.stdout
    # Over HTTP, a trial list reads no database: SQLAlchemy is not imported for it.
    assert "sqlalchemy" not in table.stderr
    assert "Recommended config" in cli("best", study_id, *server).stdout
    assert "Recommended config" in cli("best", study_id, "--watch", *server).stdout

    script = cli("export", study_id, "--format", "torchrun", *server)
    assert script.returncode == 0 and "torchrun --standalone" in script.stdout
    hf = cli("export", study_id, "-f", "hf", *server)
    assert hf.returncode == 0 and "training_args_kwargs = {" in hf.stdout

    again = cli("cancel", study_id, *server)
    assert again.returncode == 2 and "already completed" in again.stderr


@pytest.mark.postgres
def test_cli_errors_are_one_line_with_a_remedy(service: Service, space_file: Path) -> None:
    server = ["--server", service.url]
    no_token = cli("submit", "tiny", "--space", str(space_file), *server, token=None)
    assert no_token.returncode == 2
    assert "HTTP 401" in no_token.stderr and "AUTOTUNER_TOKEN" in no_token.stderr
    bad = cli("submit", "tiny", "--space", "no-such-space", *server)
    assert bad.returncode == 2 and "not a built-in space" in bad.stderr
    missing = cli("best", "st-nope0000", *server)
    assert missing.returncode == 2 and "no study" in missing.stderr
    down = cli("status", "--server", f"http://127.0.0.1:{free_port()}")
    assert down.returncode == 2 and "cannot reach the autotuner service" in down.stderr
    for proc in (no_token, bad, missing, down):
        assert len([line for line in proc.stderr.splitlines() if line.strip()]) <= 2
        assert "Traceback" not in proc.stderr


def test_the_same_verbs_work_on_a_local_database(tmp_path: Path, space_file: Path) -> None:
    db = ["--db", f"sqlite:///{tmp_path / 'local.db'}"]
    submitted = cli("submit", "tiny", "--space", str(space_file), "--trials", "3", *db)
    assert submitted.returncode == 0, submitted.stderr
    study_id = submitted.stdout.strip()
    status = json.loads(cli("status", study_id, "--json", *db).stdout)
    assert status["status"] == "queued" and status["max_trials"] == 3
    listed = json.loads(cli("status", "--json", *db).stdout)
    assert [s["id"] for s in listed] == [study_id]
    assert "no completed trial yet" in cli("best", study_id, *db).stdout
    no_best = cli("export", study_id, *db)
    assert no_best.returncode == 2 and "nothing to export" in no_best.stderr
    cancelled = cli("cancel", study_id, *db)
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
    assert json.loads(cli("status", study_id, "--json", *db).stdout)["status"] == "cancelled"
    bad = cli("submit", "tiny", "--space", str(space_file), "--gpus", "0", *db)
    assert bad.returncode == 2


def test_cli_import_stays_light() -> None:
    code = (
        "import sys, autotuner.cli.commands; heavy = ('ray', 'torch', 'optuna', 'sqlalchemy', "
        "'fastapi', 'uvicorn', 'httpx'); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.postgres
def test_an_interrupted_study_waits_for_resume_on_the_service(
    service: Service, space_file: Path
) -> None:
    """A service never adopts an interrupted study on its own (issue 42: a later `serve` ran
    one without being asked); `resume --server` queues it and the service runs it to its end."""
    from autotuner.search.space import parse_space
    from autotuner.spec import ModelSpec
    from autotuner.storage.models import StudyStatus
    from autotuner.storage.session import Database
    from autotuner.storage.study_repo import StudyRepo
    from autotuner.study.coordinator import create_study

    db = Database(service.db_url)
    model = ModelSpec.resolve({"preset": "tiny"})
    stopped = create_study(db, model=model, space=parse_space(REPLAY_SPACE), max_trials=3)
    with db.session() as s:
        StudyRepo(s).set_status(StudyRepo(s).require(stopped), StudyStatus.INTERRUPTED)
    server = ["--server", service.url]
    # A study submitted after it runs to its end: the service's discovery has had many rounds.
    other = cli("submit", "tiny", "--space", str(space_file), "--trials", "3", *server)
    assert other.returncode == 0, other.stderr
    done = cli("best", other.stdout.strip(), "--watch", "--json", "--interval", "0.3", *server)
    assert json.loads(done.stdout.splitlines()[-1])["status"] == "completed"
    assert json.loads(cli("status", stopped, "--json", *server).stdout)["status"] == "interrupted"

    resumed = cli("resume", stopped, *server)
    assert resumed.returncode == 0 and "resumed on the service" in resumed.stdout, resumed.stderr
    watched = cli("best", stopped, "--watch", "--json", "--interval", "0.3", *server)
    assert json.loads(watched.stdout.splitlines()[-1])["status"] == "completed"
    again = cli("resume", stopped, *server)
    assert again.returncode == 2 and "only an interrupted study resumes" in again.stderr
