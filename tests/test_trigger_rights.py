"""Who may trigger a deploy may not run code in Airflow (issue 57): where raylift writes and whether a model's own
code may run come from the cluster's connection or an operator-set allow-list, never from Params alone; run records
under an injective key that includes the DAG. The judges: Airflow's own configuration (``[core] dags_folder`` /
``plugins_folder`` from its environment form), Airflow's connection lookup (``AIRFLOW_CONN_*``) and raylift's
stores on disk."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from raylift.errors import RayliftValueError
from tests.hooks.test_raylift_cluster import add_connection


@pytest.fixture
def airflow_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Airflow's DAGs and plugins folders, as the worker's Airflow configuration names them."""
    dags, plugins = tmp_path / "airflow" / "dags", tmp_path / "airflow" / "plugins"
    dags.mkdir(parents=True)
    plugins.mkdir(parents=True)
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(dags))
    monkeypatch.setenv("AIRFLOW__CORE__PLUGINS_FOLDER", str(plugins))
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "raylift"))
    monkeypatch.delenv("RAYLIFT_ALLOWED_MODEL_STORES", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    return dags, plugins


# -- 1. where raylift writes -------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["local", "ray"])
def test_a_params_model_store_in_airflows_dags_folder_is_refused(
    airflow_folders: tuple[Path, Path], target: str,
) -> None:
    from raylift.targets import resolve_target

    dags, _ = airflow_folders
    options: dict[str, Any] = {"model_store": str(dags / "models")}
    if target == "ray":
        options |= {"dashboard_url": "http://ray-head:8265", "serve_url": "http://ray-head:8000"}
    with pytest.raises(RayliftValueError, match=r"target_options\.model_store .*dags.* Airflow's \[core\] dags_folder"):
        resolve_target(target, options, None)
    assert not (dags / "models").exists()  # nothing was written


def test_the_dags_folder_is_refused_whatever_the_allow_list_says(
    airflow_folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from raylift.targets import resolve_target

    dags, plugins = airflow_folders
    monkeypatch.setenv("RAYLIFT_ALLOWED_MODEL_STORES", json.dumps([str(tmp_path)]))  # Airflow's folders under it
    for store in (plugins, dags / "x", tmp_path / "airflow"):  # inside, and holding them (both directions)
        with pytest.raises(RayliftValueError, match=r"model_store .*Airflow's \[core\] (dags|plugins)_folder"):
            resolve_target("local", {"model_store": str(store)}, None)
    # a symlink does not hide where it points
    link = tmp_path / "innocent"
    link.symlink_to(dags)
    with pytest.raises(RayliftValueError, match=r"dags_folder"):
        resolve_target("local", {"model_store": str(link / "models")}, None)


def test_a_params_model_store_outside_the_allow_list_is_refused_naming_what_to_do(
    airflow_folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from raylift.targets import resolve_target

    elsewhere = tmp_path / "elsewhere" / "models"
    for store in (str(elsewhere), "s3://someone-elses-bucket/raylift"):
        with pytest.raises(RayliftValueError) as err:
            resolve_target("local", {"model_store": store}, None)
        message = str(err.value)
        assert "target_options.model_store" in message and store in message
        assert "RAYLIFT_ALLOWED_MODEL_STORES" in message and "cluster_conn_id" in message
    assert not elsewhere.exists()


def test_an_allowed_root_or_the_default_store_is_honoured(
    airflow_folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from raylift.config import local_settings
    from raylift.targets import resolve_target

    default = str(local_settings().model_store)
    assert resolve_target("local", {"model_store": default}, None).model_store_uri() == default
    root = tmp_path / "stores"
    monkeypatch.setenv("RAYLIFT_ALLOWED_MODEL_STORES", f"{root}{os.pathsep}s3://models-dev/raylift")
    assert resolve_target("local", {"model_store": str(root / "a")}, None).model_store_uri() == str(root / "a")
    assert resolve_target("local", {"model_store": "s3://models-dev/raylift/team-a"}, None)
    with pytest.raises(RayliftValueError, match="RAYLIFT_ALLOWED_MODEL_STORES"):  # a prefix, not a string prefix
        resolve_target("local", {"model_store": "s3://models-dev/raylift-other"}, None)
    monkeypatch.setenv("RAYLIFT_ALLOWED_MODEL_STORES", json.dumps(["s3://models-dev/raylift", str(root)]))
    assert resolve_target("local", {"model_store": str(root)}, None)


def test_a_connections_model_store_is_allowed_but_never_in_airflows_folders(
    airflow_folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from raylift.targets import resolve_target

    _, plugins = airflow_folders
    add_connection(monkeypatch, "dev", kind="local", model_store=str(tmp_path / "dev-store"))
    assert resolve_target("local", {}, "dev").model_store_uri() == str(tmp_path / "dev-store")
    add_connection(monkeypatch, "dev", kind="local", model_store=str(plugins))
    with pytest.raises(RayliftValueError, match=r"connection 'dev'.*model_store .*plugins_folder"):
        resolve_target("local", {}, "dev")


AWS_WHERE = {"ecs": {"cluster": "raylift", "region_name": "us-west-2", "cloud_map_namespace": "raylift.local"},
             "eks": {"cluster_name": "raylift", "region_name": "us-west-2", "worker_nodegroup": "gpu"}}


@pytest.mark.parametrize("target", ["ecs", "eks"])
def test_a_params_only_aws_run_writes_only_under_an_allowed_s3_root(
    airflow_folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, target: str,
) -> None:
    """An MWAA environment's bucket holds its DAGs (``dags/``), plugins and requirements, and its execution role may
    write there: a Params-only run may not point raylift's writes at it (seen failing before the check: resolved)."""
    from raylift.targets import resolve_target

    mwaa = {**AWS_WHERE[target], "bucket": "airflow-prod-env", "model_prefix": "dags"}
    with pytest.raises(RayliftValueError) as err:
        resolve_target(target, mwaa, None)
    message = str(err.value)
    assert f"this {target} run" in message and "bucket + model_prefix = s3://airflow-prod-env/dags" in message
    assert "RAYLIFT_ALLOWED_MODEL_STORES" in message and "cluster_conn_id" in message and "none set" in message
    # a root of the whole bucket allows every prefix in it; one prefix of it allows only what lies under it
    monkeypatch.setenv("RAYLIFT_ALLOWED_MODEL_STORES", json.dumps(["s3://models-dev", "/srv/raylift"]))
    dev = {**AWS_WHERE[target], "bucket": "models-dev"}
    assert resolve_target(target, dev, None).model_store_uri() == "s3://models-dev/models"
    with pytest.raises(RayliftValueError, match="s3://airflow-prod-env/dags"):
        resolve_target(target, mwaa, None)
    with pytest.raises(RayliftValueError, match=r"s3://models-dev-other/models"):  # a bucket, not a string prefix
        resolve_target(target, {**dev, "bucket": "models-dev-other"}, None)
    monkeypatch.setenv("RAYLIFT_ALLOWED_MODEL_STORES", "s3://models-dev/raylift")
    with pytest.raises(RayliftValueError) as err:
        resolve_target(target, dev, None)
    assert "bucket + model_prefix = s3://models-dev/models" in str(err.value)
    assert "state_prefix" not in str(err.value)  # s3://models-dev/raylift, the default state prefix, is allowed
    for prefix in ("model_prefix", "artifacts_prefix", "build_context_prefix"):
        assert f"bucket + {prefix}" in str(err.value)
    inside = {f: f"raylift/{f}" for f in ("model_prefix", "state_prefix", "artifacts_prefix", "build_context_prefix")}
    assert resolve_target(target, {**dev, **inside}, None).model_store_uri() == "s3://models-dev/raylift/model_prefix"


@pytest.mark.component
@pytest.mark.parametrize("target", ["ecs", "eks"])
def test_a_connections_bucket_is_allowed_as_it_is(
    airflow_folders: tuple[Path, Path], aws: str, monkeypatch: pytest.MonkeyPatch, target: str,
) -> None:
    """Whoever edits connections chose the bucket: no root needed (moto: the connection's claim record is written
    to its state store)."""
    import boto3

    from raylift.targets import resolve_target

    boto3.client("s3", region_name="us-west-2").create_bucket(
        Bucket="models-prod", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    add_connection(monkeypatch, "prod", kind=target, bucket="models-prod", **AWS_WHERE[target])
    assert resolve_target(target, {}, "prod").model_store_uri() == "s3://models-prod/models"


# -- 2. a model repo's own code runs only where the connection allows it -------------------------------------------
class _Ran(Exception):
    """The engine-args check (which imports the model's code) was reached."""


def _no_check(*args: Any, **kwargs: Any) -> None:
    raise _Ran()


@pytest.mark.parametrize("args", [
    {"trust_remote_code": True},
    {"trust_remote_code": "true"},
    {"worker_extension_cls": "my_pkg.Extension"},
    {"logits_processors": ["my_pkg.Processor"]},
])
def test_remote_code_from_params_is_refused_before_the_check_runs(
    airflow_folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, args: dict[str, Any],
) -> None:
    import subprocess

    from raylift.targets import resolve_target

    monkeypatch.setattr(subprocess, "run", _no_check)  # the local check's runtime Python: never started
    monkeypatch.setattr("raylift.targets.local.run_isolated", _no_check)
    target = resolve_target("local", {}, None)
    with pytest.raises(RayliftValueError, match=r"engine_args\.\w+ .*allow_remote_code.*cluster_conn_id") as err:
        target.validate_engine_args("/models/m", args)
    assert "Nothing was applied" in str(err.value)


def test_remote_code_is_refused_by_a_connection_that_does_not_allow_it_and_run_where_one_does(
    airflow_folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import subprocess

    from raylift.hooks.raylift_cluster import ClusterConnectionError, RayliftClusterHook
    from raylift.targets import resolve_target

    monkeypatch.setattr(subprocess, "run", _no_check)
    monkeypatch.setattr("raylift.targets.local.run_isolated", _no_check)  # the check's launcher (raylift.local.isolated)
    store = str(tmp_path / "store")
    add_connection(monkeypatch, "dev", kind="local", model_store=store)
    with pytest.raises(RayliftValueError, match=r"connection 'dev'.*extra allow_remote_code"):
        resolve_target("local", {}, "dev").validate_engine_args("/models/m", {"trust_remote_code": True})
    add_connection(monkeypatch, "dev", kind="local", model_store=store, allow_remote_code=True)
    assert RayliftClusterHook("dev").cluster().allow_remote_code is True
    with pytest.raises(_Ran):  # allowed: the check runs
        resolve_target("local", {}, "dev").validate_engine_args("/models/m", {"trust_remote_code": True})
    add_connection(monkeypatch, "dev", kind="local", allow_remote_code="maybe")
    with pytest.raises(ClusterConnectionError, match=r"extra 'allow_remote_code' must be true or false"):
        RayliftClusterHook("dev").cluster()
    # ordinary args still go to the check, and false is no remote code
    with pytest.raises(_Ran):
        resolve_target("local", {}, None).validate_engine_args("/models/m", {"trust_remote_code": False,
                                                                              "max_model_len": 512})


def test_remote_code_is_refused_on_targets_that_check_nothing_before_the_deploy(
    airflow_folders: tuple[Path, Path],
) -> None:
    from raylift.targets.base import Target

    class Bare(Target):  # ecs/eks: the image's vLLM parses the args when a replica starts (base behaviour)
        name = "bare"

    Bare.__abstractmethods__ = frozenset()
    with pytest.raises(RayliftValueError, match=r"engine_args\.trust_remote_code"):
        Bare().validate_engine_args("s3://b/m", {"trust_remote_code": True})


def test_the_connection_form_has_the_remote_code_field() -> None:
    from raylift.provider import CLUSTER_CONN_FIELDS

    assert CLUSTER_CONN_FIELDS["allow_remote_code"]["schema"] == {"type": "boolean", "default": False}


# -- 3. one exact key per run, with its DAG ------------------------------------------------------------------------
# Two run ids the old spelling (every run of ":", "+", "~"... as "_") mapped to one key: a trigger-time run id
# chosen to meet a scheduled redeploy's.
SCHEDULED = "redeploy__scheduled__2026-12-01T03:00:00+00:00__prod"
PLANTED = "redeploy__scheduled__2026-12-01T03_00_00_00_00__prod"


def test_two_run_ids_one_key_merged_are_kept_apart(tmp_path: Path) -> None:
    from raylift.release.state import DeploymentState, run_file, run_key
    from raylift.store import LocalStore

    assert run_key(SCHEDULED) != run_key(PLANTED)
    assert run_file(SCHEDULED, "record") != run_file(PLANTED, "record")
    state = DeploymentState(LocalStore(tmp_path), "prod@abc", "llm")
    state.save_pre_deploy(SCHEDULED, {"served": "before the redeploy"})
    state.save_pre_deploy(PLANTED, {"served": "what the planted run wants restored"})
    assert state.pre_deploy(SCHEDULED) == {"served": "before the redeploy"}
    state.begin_apply(PLANTED, {"b": 1}, {"c": 1})
    assert state.applied(SCHEDULED) is None
    state.save_canary(PLANTED, {"p": 1})
    state.save_blue_green(PLANTED, {"p": 1})
    state.save_hold(PLANTED, {"p": 1})
    assert state.canary(SCHEDULED) is None and state.blue_green(SCHEDULED) is None and state.hold(SCHEDULED) is None


def test_the_run_key_includes_the_dag_and_stays_a_plain_folder_name(tmp_path: Path) -> None:
    import re

    from raylift.release.state import run_key

    assert run_key(SCHEDULED, dag_id="raylift_deploy") == run_key(SCHEDULED)  # the DAG that writes run records
    assert run_key(SCHEDULED, dag_id="raylift_deploy_gpu") != run_key(SCHEDULED)
    for run in (SCHEDULED, "x" * 250, "~~", "..", "a/../../b"):
        prefix, name = run_key(run).rsplit("/", 1)
        assert prefix == "_raylift/runs"
        assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}", name), name  # what the reports app serves
        # outside a task (the reports app, a report link) a folder name names itself
        assert run_key(name) == run_key(run)


def test_records_written_under_the_old_key_are_still_read(tmp_path: Path) -> None:
    from raylift.release.state import DeploymentState, run_file
    from raylift.store import LocalStore

    store = LocalStore(tmp_path)
    old_run = "manual__2026-11-30T10:00:00+00:00"
    old = "manual__2026-11-30T10_00_00_00_00"  # how records were kept before (issue 57)
    state = DeploymentState(store, "local", "llm")
    store.write_json(f"{state.prefix}/last_good.json", {"run_id": old_run, "config": {}, "config_hash": "h"})
    store.write_json(f"_raylift/runs/{old}/record.json", {"run_id": old_run, "params": {"replicas": 2}})
    store.write_json(f"_raylift/runs/{old}/benchmark.json", {"levels": []})
    store.write_json(f"{state.prefix}/pre_deploy/{old}.json", {"served": "before"})
    store.write_json(f"{state.prefix}/applied/{old}.json", {"config": {}, "config_hash": "h"})
    # the redeploy reads the last good run's Params this way (raylift.operators.redeploy)
    good = state.last_good()
    assert store.read_json(run_file(good["run_id"], "record")) == {"run_id": old_run, "params": {"replicas": 2}}
    assert store.read_json(run_file(good["run_id"], "benchmark")) == {"levels": []}
    # a run's own snapshot is read under its exact key only: one a colliding run planted under the old spelling
    # is never taken for this run's (the rollback would restore it)
    assert state.pre_deploy(old_run) is None and state.applied(old_run) is None
    # the last good run's record was carried over, not moved: the old folder stays for the report's history
    assert store.exists(f"_raylift/runs/{old}/record.json")
