"""A cluster's identity is where it is, not how it is reached, and one cluster has one connection wherever Airflow
keeps its connections. The judges: Airflow's own connection lookup (``AIRFLOW_CONN_*``; the metadata database, written
by Airflow's own ``airflow connections add`` after ``airflow db migrate``), the resolver of this machine
(``localhost`` is 127.0.0.1 in /etc/hosts) and raylift's release state keyed by the identity."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from raylift.hooks.raylift_cluster import (
    ClusterConnectionError,
    RayliftClusterHook,
    canonical_host,
    host_port,
)
from tests.hooks.test_raylift_cluster import add_connection

ROOT = Path(__file__).resolve().parents[2]


def identity(monkeypatch: pytest.MonkeyPatch, conn_id: str, **extra: Any) -> str:
    add_connection(monkeypatch, conn_id, **extra)
    return RayliftClusterHook(conn_id).cluster().identity


def test_the_identity_is_where_the_cluster_is_not_how_it_is_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = identity(monkeypatch, "prod", kind="ray", dashboard_url="https://Ray.Example.ORG.:443",
                   serve_url="https://ray.example.org:8000")
    same = [
        {"dashboard_url": "https://ray.example.org", "serve_url": "https://ray.example.org:8000"},
        {"dashboard_url": "https://ray.example.org/", "serve_url": "https://serve.example.org"},  # serve_url edit
        {"dashboard_url": "http://ray.example.org:443", "serve_url": "https://ray.example.org:8000"},  # scheme
        {"dashboard_url": "https://ray.example.org", "aws_conn_id": "aws_prod"},
    ]
    for extra in same:
        assert identity(monkeypatch, "prod", kind="ray", **extra) == ray, extra
    for moved in ("https://ray.example.org:8443", "https://ray2.example.org", "http://ray.example.org"):
        assert identity(monkeypatch, "prod", kind="ray", dashboard_url=moved) != ray, moved

    ecs = identity(monkeypatch, "e", kind="ecs", cluster="raylift", region_name="us-west-2", aws_conn_id="aws_a")
    assert identity(monkeypatch, "e", kind="ecs", cluster="raylift", region_name="US-WEST-2",
                    aws_conn_id="aws_b") == ecs  # another aws_conn_id: the same cluster
    assert identity(monkeypatch, "e", kind="ecs", cluster="other", region_name="us-west-2") != ecs
    eks = identity(monkeypatch, "k", kind="eks", cluster_name="c", region_name="us-east-1")
    assert identity(monkeypatch, "k", kind="eks", cluster_name="c", region_name="us-east-1", namespace="raylift",
                    rayservice_name="raylift", kubernetes_conn_id="kube_b") == eks  # defaults made explicit
    assert identity(monkeypatch, "k", kind="eks", cluster_name="c", region_name="us-east-1", namespace="x") != eks


def test_hosts_have_one_spelling() -> None:
    assert host_port("https://Host.:443") == host_port("https://host") == ("host", 443)
    assert host_port("http://[::ffff:127.0.0.1]:8265") == ("127.0.0.1", 8265)
    assert host_port("http://[0:0::1]:80") == host_port("http://[::1]") == ("::1", 80)
    assert canonical_host("Bücher.example.") == "xn--bcher-kva.example"


def test_a_name_and_its_address_are_one_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``localhost`` and ``127.0.0.1`` on one port: the second connection is refused naming both."""
    from raylift.targets import resolve_target

    store = str(tmp_path / "store")
    add_connection(monkeypatch, "by_name", kind="ray", dashboard_url="http://localhost:18265",
                   serve_url="http://localhost:18000", model_store=store)
    add_connection(monkeypatch, "by_address", kind="ray", dashboard_url="http://127.0.0.1:18265",
                   serve_url="http://127.0.0.1:18000", model_store=store)
    with pytest.raises(ClusterConnectionError, match=r"'by_address' and 'by_name' point at the same cluster"):
        resolve_target("local", {}, "by_name")


# Runs in an Airflow of its own: AIRFLOW_HOME with a migrated sqlite metadata database, read as the API server reads
# it (_AIRFLOW_PROCESS_CONTEXT=server: Airflow's MetastoreBackend), no AIRFLOW_CONN_* at all.
DB_RUN = """
import json, sys
from raylift.hooks.raylift_cluster import ClusterConnectionError
from raylift.targets import resolve_target

out = {"first": resolve_target("local", {}, "prod").cluster_identity}
try:
    out["second"] = resolve_target("local", {}, "prod_again").cluster_identity
except ClusterConnectionError as exc:
    out["refused"] = str(exc)
out["first_again"] = resolve_target("local", {}, "prod").cluster_identity
print(json.dumps(out))
"""


def test_a_connection_in_the_metadata_database_to_a_cluster_another_drives_is_refused(tmp_path: Path) -> None:
    """Two connections to one cluster, both only in the metadata database (the README's `airflow connections add`),
    which a worker cannot list: the first to run drives the cluster; the second is refused naming both."""
    home = tmp_path / "airflow"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_CONN_", "AIRFLOW_VAR_"))}
    env.update({"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
                "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}"})
    airflow = str(Path(sys.executable).with_name("airflow"))

    def run(*argv: str, **extra_env: str) -> str:
        done = subprocess.run(argv, env={**env, **extra_env}, capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)
        assert done.returncode == 0, (argv[:3], done.stdout[-1500:], done.stderr[-3000:])
        return done.stdout

    run(airflow, "db", "migrate")
    store = str(tmp_path / "store")
    for conn_id, host in (("prod", "127.0.0.1"), ("prod_again", "127.0.0.1")):
        extra = {"kind": "ray", "dashboard_url": f"http://{host}:18265", "serve_url": f"http://{host}:18000",
                 "model_store": store}
        run(airflow, "connections", "add", conn_id, "--conn-type", "raylift_cluster", "--conn-password", "tok",
            "--conn-extra", json.dumps(extra))
    out = json.loads(run(sys.executable, "-c", textwrap.dedent(DB_RUN),
                         _AIRFLOW_PROCESS_CONTEXT="server").splitlines()[-1])
    assert "second" not in out, out
    assert "'prod' and 'prod_again' point at the same cluster" in out["refused"], out
    assert "metadata database" in out["refused"] and out["first_again"] == out["first"], out
