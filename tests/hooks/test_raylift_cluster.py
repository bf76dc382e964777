"""A cluster is an Airflow connection (type ``raylift_cluster``), and its Ray token goes only to that connection's
hosts. The judges: Airflow's own ProvidersManager (the form fields its UI and REST API serve), Airflow's own
connection lookup (``AIRFLOW_CONN_*``), and a recording HTTP server on 127.0.0.1 that keeps every request's headers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from raylift.errors import CredentialsError, RayliftValueError
from raylift.hooks.ray_dashboard import RayAuthError
from raylift.hooks.raylift_cluster import ClusterConnectionError
from tests.fixtures.http_standin import JsonHandler, serve_http

TOKEN = "tok-" + "9f3c2a7e5b1d4c8a"  # what the worker or the connection holds
NODES = {"data": {"result": {"result": [
    {"state": "ALIVE", "node_id": "n1", "is_head_node": True, "resources_total": {"CPU": 2.0}},
]}}}


class Recorder(JsonHandler):
    """Answers as a Ray dashboard would for nodes and Serve apps; records each request's path and headers."""

    seen: list[tuple[str, dict[str, str]]]

    def do_GET(self) -> None:
        type(self).seen.append((self.path, dict(self.headers.items())))
        if self.path.startswith("/api/v0/nodes"):
            self._json(NODES)
        elif self.path.startswith("/api/serve/applications"):
            self._json({"applications": {"hello": {"status": "RUNNING", "last_deployed_time_s": 10**10}}})
        else:
            self._json({"version": "4", "ray_version": "2.60.0"})


def recorder() -> Any:
    return type("Rec", (Recorder,), {"seen": []})


@pytest.fixture
def two_servers() -> Iterator[tuple[Any, str, Any, str]]:
    """The connection's own dashboard and another server at an address a run's Params could name."""
    own, other = recorder(), recorder()
    with serve_http(own) as own_port, serve_http(other) as other_port:
        yield own, f"http://127.0.0.1:{own_port}", other, f"http://127.0.0.1:{other_port}"


def add_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, *, password: str | None = TOKEN,
                   **extra: Any) -> None:
    """An Airflow connection as Airflow reads it from the environment (``AIRFLOW_CONN_<ID>``, JSON form)."""
    conn: dict[str, Any] = {"conn_type": "raylift_cluster", "extra": extra}
    if password:
        conn["password"] = password
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def auth_headers(server: Any) -> list[str]:
    return [h.get("Authorization", "") for _, h in server.seen if h.get("Authorization")]


def test_airflow_registers_the_cluster_connection_type_with_its_form() -> None:
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    hook = manager.hooks["raylift_cluster"]
    assert hook is not None and hook.hook_class_name == "raylift.hooks.raylift_cluster.RayliftClusterHook"
    fields = {k.rsplit("__", 1)[1] for k in manager.connection_form_widgets if k.startswith("extra__raylift_cluster__")}
    assert {"kind", "dashboard_url", "serve_url", "cluster", "cluster_name", "model_store", "redeploy"} <= fields
    kind = manager.connection_form_widgets["extra__raylift_cluster__kind"].field
    assert kind["schema"]["enum"] == ["local", "ray", "ecs", "eks"]
    behaviour = manager.field_behaviours["raylift_cluster"]
    assert behaviour["relabeling"] == {"password": "Ray auth token"}
    assert "host" in behaviour["hidden_fields"]


def test_a_params_url_gets_no_token_and_the_run_is_refused_by_name(
    two_servers: tuple[Any, str, Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker holds a Ray token (as the old docs told operators to set it); a run's Params point the ray
    target's dashboard at another server: refused before anything is sent, naming the option."""
    from raylift.operators.cluster import ScaleClusterOperator

    _, _, other, other_url = two_servers
    monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN)
    op = ScaleClusterOperator(task_id="scale", workers=0, target="ray",
                              target_options={"dashboard_url": other_url, "serve_url": other_url})
    with pytest.raises(CredentialsError, match=r"target_options\.dashboard_url came from this run's Params") as err:
        op.execute({})
    assert TOKEN not in str(err.value)
    assert other.seen == []  # not even a request without the token


def test_the_connections_own_host_gets_its_token(
    two_servers: tuple[Any, str, Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from raylift.targets import resolve_target

    own, own_url, other, other_url = two_servers
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    add_connection(monkeypatch, "dev", kind="ray", dashboard_url=own_url, serve_url=own_url)
    target = resolve_target("local", {}, "dev")
    assert target.cluster_state().nodes == 1
    assert auth_headers(own) == [f"Bearer {TOKEN}"]

    # the deploy wait, as the triggerer rebuilds it from its serialized form: the token is looked up there
    trigger = target.deploy_trigger(app_names=["hello"], timeout_s=30)
    path, kwargs = trigger.serialize()
    assert TOKEN not in json.dumps(kwargs) and kwargs["cluster_conn_id"] == "dev"
    module, name = path.rsplit(".", 1)
    rebuilt = getattr(__import__(module, fromlist=[name]), name)(**kwargs)
    assert asyncio.run(rebuilt.apoll())["applications"]["hello"]["status"] == "RUNNING"
    assert auth_headers(own) == [f"Bearer {TOKEN}"] * 2

    # a run naming the connection may not re-point it through its Params
    with pytest.raises(RayliftValueError, match=r"\['dashboard_url'\] came from this run's Params.*'dev'"):
        resolve_target("ray", {"dashboard_url": other_url}, "dev")
    # nor may code hand the connection's token to another address
    from raylift.hooks.ray_dashboard import RayDashboardHook

    with pytest.raises(RayAuthError, match="Refusing to send connection 'dev'"):
        RayDashboardHook(other_url, conn_id="dev")
    assert other.seen == []


def test_a_params_url_without_a_token_anywhere_still_works_and_sends_none(
    two_servers: tuple[Any, str, Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster without token auth (Compose's) stays reachable by URL; nothing is sent as a credential."""
    from raylift.targets import resolve_target

    _, _, other, other_url = two_servers
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    target = resolve_target("ray", {"dashboard_url": other_url, "serve_url": other_url}, None)
    assert target.cluster_state().nodes == 1
    assert other.seen and auth_headers(other) == []


def test_cluster_identity_keys_release_state(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """dev and prod sharing one store keep their own state; a connection re-pointed at another cluster starts
    afresh; connection-less local keeps today's keys."""
    from raylift.operators.redeploy import LastGoodConfOperator

    store = str(tmp_path / "store")
    monkeypatch.setenv("RAYLIFT_ALLOWED_MODEL_STORES", store)  # the connection-less run's Params name it (issue 57)
    add_connection(monkeypatch, "dev", kind="ray", dashboard_url="http://127.0.0.1:18265",
                   serve_url="http://127.0.0.1:18000", model_store=store)
    add_connection(monkeypatch, "prod", kind="ray", dashboard_url="http://127.0.0.1:28265",
                   serve_url="http://127.0.0.1:28000", model_store=store)

    def state(conn_id: str | None) -> Any:
        return LastGoodConfOperator(task_id="t", cluster_conn_id=conn_id, target="local",
                                    target_options={} if conn_id else {"model_store": store}).state_for("llm")

    dev, prod = state("dev"), state("prod")
    assert dev.prefix != prod.prefix and dev.prefix.startswith("_raylift/dev_") and prod.prefix.startswith("_raylift/prod_")
    dev.record_good("run-dev", {"applications": [{"name": "llm", "import_path": "dev:app"}]})
    assert prod.last_good() is None and dev.last_good() is not None
    assert state(None).prefix == "_raylift/local/llm"

    add_connection(monkeypatch, "dev", kind="ray", dashboard_url="http://127.0.0.1:38265",
                   serve_url="http://127.0.0.1:38000", model_store=store)  # re-pointed
    assert state("dev").prefix != dev.prefix and state("dev").last_good() is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"kind": "kubernetes"}, r"kind 'kubernetes': set its extra 'kind' to one of"),
        ({"kind": "ray", "redeploy": 3}, r"extra 'redeploy' must be true or false"),
        ({"kind": "ray", "redeploy": "maybe"}, r"extra 'redeploy' must be true or false \(got 'maybe'\)"),
    ],
)
def test_a_bad_connection_is_refused_naming_the_field(
    extra: dict[str, Any], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from raylift.targets import resolve_target

    add_connection(monkeypatch, "bad", **extra)
    with pytest.raises(ClusterConnectionError, match=message):
        resolve_target("local", {}, "bad")


def test_a_missing_or_foreign_connection_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from raylift.targets import resolve_target

    with pytest.raises(ClusterConnectionError, match="No Airflow connection 'nosuch'"):
        resolve_target("local", {}, "nosuch")
    monkeypatch.setenv("AIRFLOW_CONN_WEB", json.dumps({"conn_type": "http", "host": "example.org"}))
    with pytest.raises(ClusterConnectionError, match="of type 'http', not 'raylift_cluster'"):
        resolve_target("local", {}, "web")
    add_connection(monkeypatch, "dev", kind="ray", dashboard_url="http://127.0.0.1:1", serve_url="http://127.0.0.1:2")
    with pytest.raises(RayliftValueError, match="target Param is 'ecs' but connection 'dev' is a 'ray' cluster"):
        resolve_target("ecs", {}, "dev")


def test_no_token_in_the_connections_repr() -> None:
    from raylift.hooks.raylift_cluster import ClusterConnection

    conn = ClusterConnection(conn_id="dev", kind="ray", options={}, token=TOKEN)
    assert TOKEN not in repr(conn) and TOKEN not in conn.identity
