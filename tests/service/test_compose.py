"""docker-compose.yml, checked without Docker: services, ordering, healthchecks, secrets, GPUs,
and that every command it runs is the one README.md documents."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def _command(service: dict[str, Any]) -> str:
    command = service.get("command")
    if isinstance(command, list):
        if command[:2] == ["sh", "-c"]:
            return command[2]
        return " ".join(command)
    return command or ""


def test_the_stack_has_its_five_services(services: dict[str, Any]) -> None:
    assert set(services) == {"postgres", "migrate", "service", "ray-head", "ray-worker"}


def test_postgres_is_healthchecked_and_not_published(services: dict[str, Any]) -> None:
    pg = services["postgres"]
    # Over TCP: on first boot the init server listens on the Unix socket only.
    assert "pg_isready -h 127.0.0.1" in " ".join(pg["healthcheck"]["test"])
    assert "ports" not in pg
    assert pg["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")


def test_migrate_runs_once_after_postgres_is_healthy(services: dict[str, Any]) -> None:
    migrate = services["migrate"]
    command = _command(migrate)
    assert "alembic upgrade head && exit 0" in command and "seq 30" in command  # retried
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert migrate["restart"] == "no"
    assert "AUTOTUNER_DATABASE_URL" in migrate["environment"]


def test_service_waits_for_migrate_postgres_and_ray(services: dict[str, Any]) -> None:
    service = services["service"]
    assert service["depends_on"] == {
        "postgres": {"condition": "service_healthy"},
        "migrate": {"condition": "service_completed_successfully"},
        "ray-head": {"condition": "service_healthy"},
    }
    assert "/healthz" in " ".join(service["healthcheck"]["test"])
    command = _command(service)
    assert "autotuner serve" in command and "--no-migrate" in command
    assert "--host 0.0.0.0" in command
    # Longer than the service's 30 s drain, so SIGTERM is not cut short by SIGKILL.
    seconds = int(service["stop_grace_period"].removesuffix("s"))
    assert seconds > 30
    # No fixed coordinator id: two replicas must never share a study's lease.
    assert "AUTOTUNER_COORDINATOR_ID" not in service["environment"]


def test_secrets_are_required_from_the_environment(services: dict[str, Any]) -> None:
    env = services["service"]["environment"]
    assert env["AUTOTUNER_TOKEN"].startswith("${AUTOTUNER_TOKEN:?")
    assert "${POSTGRES_PASSWORD:?" in env["AUTOTUNER_DATABASE_URL"]
    for name in ("service", "ray-head", "ray-worker"):
        ray_env = services[name]["environment"]
        assert ray_env["RAY_AUTH_MODE"] == "token"
        assert ray_env["RAY_AUTH_TOKEN"].startswith("${RAY_AUTH_TOKEN:?")
    text = (REPO / "docker-compose.yml").read_text()
    # No literal secret anywhere: every password/token value is an interpolation.
    keys = re.finditer(r"^\s*(\w*(?:PASSWORD|TOKEN)\w*):\s*(\S+)", text, flags=re.MULTILINE)
    for match in keys:
        assert match.group(2).startswith(("${", "token")), match.group(0)


def test_ray_worker_reserves_nvidia_gpus(services: dict[str, Any]) -> None:
    worker = services["ray-worker"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert worker["build"]["target"] == "worker"
    assert worker["depends_on"]["ray-head"]["condition"] == "service_healthy"
    assert "--address=ray-head:6379" in _command(worker)


def test_ray_head_is_healthchecked_and_runs_no_trials(services: dict[str, Any]) -> None:
    head = services["ray-head"]
    assert "health-check" in head["healthcheck"]["test"]
    command = _command(head)
    assert "--head" in command and "--num-gpus=0" in command and "--num-cpus=0" in command
    # Other GPU hosts join over fixed, published ports (README: several GPU hosts).
    published = " ".join(head["ports"])
    for port in ("6379", "6380-6381", "10002-10100"):
        assert f":{port}:{port}" in published
    assert "--node-manager-port=6380" in command and "--object-manager-port=6381" in command


def test_every_command_is_documented_in_the_readme(services: dict[str, Any]) -> None:
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "## Deploy with docker compose" in (REPO / "README.md").read_text()
    for name, service in services.items():
        command = _command(service)
        if command:
            assert " ".join(command.split()) in readme, f"{name}: `{command}` not in README"
    assert "docker compose up -d --build" in readme


def test_dockerfile_has_the_targets_compose_builds(services: dict[str, Any]) -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    targets = set(re.findall(r"^FROM \S+ AS (\w+)", dockerfile, flags=re.MULTILINE))
    built = {s["build"]["target"] for s in services.values() if "build" in s}
    assert built <= targets == {"control", "worker"}
    assert "pip install -e ." in dockerfile  # migrations/ and search_spaces/ beside the package
    # Every node of a Ray cluster must run the same Ray: pinned once, in the shared stage.
    assert re.search(r"^ARG RAY_VERSION=\d+\.\d+\.\d+$", dockerfile, flags=re.MULTILINE)
    assert re.search(r'^ARG TORCH="torch==\d+\.\d+\.\d+"$', dockerfile, flags=re.MULTILINE)


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    assert exe, "check-jsonschema is a dev dependency: pip install -e '.[dev]'"
    return subprocess.run(
        [exe, "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("name", ["docker-compose.yml", "docker-compose.multihost.yml"])
def test_compose_files_match_the_compose_specification(name: str) -> None:
    proc = _validate(REPO / name)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_schema_check_catches_a_broken_file(tmp_path: Path) -> None:
    text = (REPO / "docker-compose.yml").read_text()
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace("    stop_grace_period: 45s", "    stop_grace_periods: 45s"))
    assert _validate(broken).returncode != 0
