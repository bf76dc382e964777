"""Credentials stay with their host: a connection's fields are trimmed and checked when read, every secret is
registered with Airflow's own masker in each form it can be printed, a Params-named connection must be of the
kind its field needs, and two connections (or a Params-only run) never point at one cluster. The judges: Airflow's
own connection lookup (``AIRFLOW_CONN_*``), Airflow's secrets masker, and a recording dashboard on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from raylift.errors import CredentialsError, RayliftValueError
from raylift.hooks.raylift_cluster import ClusterConnectionError
from tests.hooks.test_raylift_cluster import TOKEN, add_connection, auth_headers, two_servers  # noqa: F401

PRINTED_FORMS = (TOKEN, TOKEN + "\n", repr(TOKEN + "\n"), repr(TOKEN + "\n")[1:-1], json.dumps(TOKEN + "\n"),
                 repr(f"Bearer {TOKEN}\n".encode()))


def test_a_pasted_newline_is_trimmed_and_no_form_of_the_token_is_logged(
    two_servers: tuple[Any, str, Any, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    from raylift.targets import resolve_target

    own, own_url, _, _ = two_servers
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    add_connection(monkeypatch, "dev", password=TOKEN + "\n", kind="ray", dashboard_url=own_url + "\n",
                   serve_url=own_url)
    caplog.set_level(logging.DEBUG)
    target = resolve_target("local", {}, "dev")
    for _ in range(3):  # every poll works
        assert target.cluster_state().nodes == 1
    path, kwargs = target.deploy_trigger(app_names=["hello"], timeout_s=30).serialize()
    module, name = path.rsplit(".", 1)
    trigger = getattr(__import__(module, fromlist=[name]), name)(**kwargs)
    assert asyncio.run(trigger.apoll())["applications"]["hello"]["status"] == "RUNNING"
    assert auth_headers(own) == [f"Bearer {TOKEN}"] * 4
    # nothing raylift logged holds the token, and Airflow's masker hides every form it could be printed in
    assert not any(TOKEN in record.getMessage() for record in caplog.records)
    for form in PRINTED_FORMS:
        line = f"httpx.LocalProtocolError: Illegal header value {form}"
        assert TOKEN not in redact(line), form


def test_an_embedded_control_character_is_refused_naming_the_field_not_the_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from raylift.targets import resolve_target

    secret = "tok-\x07" + "5e1c9d2b7a3f"
    add_connection(monkeypatch, "dev", password=secret, kind="ray", dashboard_url="http://127.0.0.1:1",
                   serve_url="http://127.0.0.1:2")
    with pytest.raises(CredentialsError, match=r"connection 'dev'.*password.*control character") as err:
        resolve_target("local", {}, "dev")
    assert "5e1c9d2b7a3f" not in str(err.value)


def test_hf_conn_id_naming_a_cluster_connection_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Naming prod's cluster connection as the hub token would send prod's Ray token to the hub."""
    from raylift.staging.sources import hub_token_from_connection
    from raylift.targets import resolve_target

    add_connection(monkeypatch, "prod", kind="ray", dashboard_url="http://127.0.0.1:1", serve_url="http://127.0.0.1:2")
    with pytest.raises(CredentialsError, match=r"hf_conn_id.*'prod'.*'raylift_cluster'.*hub token") as err:
        resolve_target("local", {"hf_conn_id": "prod"}, None)
    assert TOKEN not in str(err.value)
    with pytest.raises(CredentialsError, match=r"'prod'.*'raylift_cluster'"):
        hub_token_from_connection("prod")
    monkeypatch.setenv("AIRFLOW_CONN_HF", json.dumps({"conn_type": "huggingface", "password": "hf_tok_1234567\n"}))
    assert hub_token_from_connection("hf") == "hf_tok_1234567"


@pytest.mark.parametrize("conn_type", ["generic", "http", "postgres"])
def test_hf_conn_id_naming_a_connection_that_is_not_the_hubs_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                                          conn_type: str) -> None:
    """Issue 57: a ``generic`` connection (any password: a database's, a webhook's) named as ``hf_conn_id`` had its
    password sent to the hub endpoint. Only the hub's own connection types carry a hub token."""
    from raylift.staging.sources import hub_token_from_connection
    from raylift.targets import resolve_target

    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", json.dumps({"conn_type": conn_type, "password": "warehouse-pw-123"}))
    with pytest.raises(CredentialsError, match=rf"hf_conn_id.*'warehouse'.*{conn_type!r}.*'huggingface' or 'hf'"):
        resolve_target("local", {"hf_conn_id": "warehouse"}, None)
    with pytest.raises(CredentialsError, match=rf"'warehouse'.*{conn_type!r}") as err:
        hub_token_from_connection("warehouse")
    assert "warehouse-pw-123" not in str(err.value)


def test_aws_conn_id_must_name_an_aws_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    from raylift.targets import resolve_target

    add_connection(monkeypatch, "prod", kind="ray", dashboard_url="http://127.0.0.1:1", serve_url="http://127.0.0.1:2")
    with pytest.raises(CredentialsError, match=r"aws_conn_id.*'prod'.*'raylift_cluster'.*'aws'"):
        resolve_target("local", {"aws_conn_id": "prod"}, None)


def test_the_allow_list_says_which_cluster_connections_a_dag_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    from raylift.targets import resolve_target

    add_connection(monkeypatch, "prod", kind="ray", dashboard_url="http://127.0.0.1:1", serve_url="http://127.0.0.1:2")
    monkeypatch.setenv("AIRFLOW_VAR_RAYLIFT_ALLOWED_CLUSTER_CONNS", json.dumps({"raylift_deploy": ["dev"]}))
    with pytest.raises(CredentialsError, match=r"'prod'.*raylift_allowed_cluster_conns.*'raylift_deploy'"):
        resolve_target("local", {}, "prod", dag_id="raylift_deploy")
    monkeypatch.setenv("AIRFLOW_VAR_RAYLIFT_ALLOWED_CLUSTER_CONNS", json.dumps(["prod"]))
    assert resolve_target("local", {}, "prod", dag_id="raylift_deploy").cluster_conn_id == "prod"


@pytest.mark.parametrize(
    "other_url",
    ["http://ray-dev:8265/", "http://RAY-DEV:8265", "HTTP://ray-dev:8265//"],
)
def test_two_connections_to_one_cluster_are_refused(other_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from raylift.targets import resolve_target

    add_connection(monkeypatch, "dev", kind="ray", dashboard_url="http://ray-dev:8265", serve_url="http://ray-dev:8000")
    add_connection(monkeypatch, "dev_again", kind="ray", dashboard_url=other_url, serve_url="http://ray-dev:8000")
    with pytest.raises(ClusterConnectionError, match=r"'dev'.*'dev_again'.*same cluster.*keep one"):
        resolve_target("local", {}, "dev_again")


def test_the_default_port_is_made_explicit(monkeypatch: pytest.MonkeyPatch) -> None:
    from raylift.targets import resolve_target

    add_connection(monkeypatch, "web1", kind="ray", dashboard_url="https://ray.example.org",
                   serve_url="https://ray.example.org/serve")
    add_connection(monkeypatch, "web2", kind="ray", dashboard_url="https://Ray.Example.org:443/",
                   serve_url="https://ray.example.org/serve")
    with pytest.raises(ClusterConnectionError, match=r"'web1'.*'web2'.*same cluster"):
        resolve_target("local", {}, "web1")


def test_a_params_only_run_at_a_connections_cluster_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from raylift.targets import resolve_target

    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    add_connection(monkeypatch, "prod", kind="ray", dashboard_url="http://ray-prod:8265",
                   serve_url="http://ray-prod:8000")
    with pytest.raises(ClusterConnectionError, match=r"connection 'prod'.*cluster_conn_id"):
        resolve_target("ray", {"dashboard_url": "http://Ray-Prod:8265/", "serve_url": "http://ray-prod:8000"}, None)


def test_a_relative_model_store_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from raylift.targets import resolve_target

    with pytest.raises(RayliftValueError, match=r"model_store 'models/here' is a relative path.*absolute"):
        resolve_target("local", {"model_store": "models/here"}, None)
    add_connection(monkeypatch, "dev", kind="ray", dashboard_url="http://127.0.0.1:1", serve_url="http://127.0.0.1:2",
                   model_store="state")
    with pytest.raises(RayliftValueError, match=r"connection 'dev'.*model_store 'state' is a relative path"):
        resolve_target("local", {}, "dev")
