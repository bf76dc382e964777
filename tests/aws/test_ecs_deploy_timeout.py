"""The deploy wait (issue 55, item 4): the ``deploy_timeout_s`` Param, not a fixed 600 s. Refused by the trigger
form and by the operators when it is no number of seconds in bounds (naming it, before anything is applied),
passed by raylift_deploy to the deploy and promote steps, and handed by each target to its own wait."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest

from raylift.config import DEPLOY_TIMEOUT_S, deploy_timeout_s
from raylift.errors import RayliftValueError
from raylift.targets import get_target

ROOT = Path(__file__).resolve().parents[2]


def deploy_dag() -> Any:
    sys.path.insert(0, str(ROOT / "dags"))
    import raylift_deploy

    return raylift_deploy.dag


@pytest.mark.parametrize("bad", [0, 29, 86401, "ten minutes", True, None, [600]])
def test_a_timeout_out_of_bounds_is_refused_naming_the_param(bad: Any) -> None:
    with pytest.raises(RayliftValueError, match="deploy_timeout_s is .*30 to 86400.*Nothing was applied"):
        deploy_timeout_s(bad)
    params = copy.deepcopy(deploy_dag().params)
    with pytest.raises(Exception, match="param deploy_timeout_s"):  # Airflow checks the schema as the conf merges
        params.update({"deploy_timeout_s": bad})
        params.validate()


def test_seconds_pass_as_numbers_a_template_rendered_as_text_too() -> None:
    assert deploy_timeout_s(1800) == deploy_timeout_s("1800") == 1800.0
    params = copy.deepcopy(deploy_dag().params)
    params.update({"deploy_timeout_s": 3600})
    params.validate()


def test_raylift_deploy_hands_the_param_to_the_deploy_and_promote_waits() -> None:
    dag = deploy_dag()
    assert dag.params["deploy_timeout_s"] == DEPLOY_TIMEOUT_S
    for task_id in ("deploy", "promote"):
        task = dag.get_task(task_id)
        assert "timeout_s" in task.template_fields, task_id
        assert task.timeout_s == "{{ params.deploy_timeout_s }}", task_id


def test_the_operators_refuse_a_bad_timeout_before_reading_the_cluster() -> None:
    from raylift.operators.deploy import ServeDeployOperator
    from raylift.operators.promote import PromoteReleaseOperator

    deploy = ServeDeployOperator(task_id="deploy", artifact={}, model={}, timeout_s="-5")
    with pytest.raises(RayliftValueError, match="deploy_timeout_s is '-5'"):
        deploy.execute({"run_id": "r"})  # no target is built: the check comes first
    promote = PromoteReleaseOperator(task_id="promote", timeout_s="0", decision={"action": "promote"})
    with pytest.raises(RayliftValueError, match="deploy_timeout_s is '0'"):
        promote.execute({"run_id": "r"})


@pytest.mark.parametrize("name, options", [
    ("local", {}),
    ("ray", {"dashboard_url": "http://10.0.0.5:8265", "serve_url": "http://10.0.0.5:8000"}),
    ("ecs", {"cluster": "ray", "bucket": "b", "head_address": "10.0.0.5"}),
    ("eks", {"cluster_name": "c", "worker_nodegroup": "gpu", "bucket": "b", "kubernetes_conn_id": "k8s"}),
])
def test_every_target_waits_as_long_as_it_is_told(name: str, options: dict[str, Any], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path))
    target = get_target(name, **options)
    trigger = target.deploy_trigger(app_names=["llm"], timeout_s=5400.0)
    assert trigger.timeout_s == 5400.0


class Ti:
    """What the deploy step reads back on resume: the release kind it pushed."""

    def xcom_pull(self, task_ids: str, key: str) -> Any:
        return {"release": "canary"}.get(key)


def test_a_wait_that_ran_out_says_which_param_to_raise() -> None:
    from raylift.errors import DeployError
    from raylift.operators.deploy import ServeDeployOperator
    from raylift.operators.promote import PromoteReleaseOperator

    event = {"status": "timeout", "message": "Serve apps llm not ready after 1200s (llm=DEPLOYING)"}
    deploy = ServeDeployOperator(task_id="deploy", artifact={}, model={}, timeout_s="1200")
    with pytest.raises(DeployError, match=r"(?s)not ready after 1200s.*deploy_timeout_s = 1200 s: raise that Param"):
        deploy.execute_complete({"ti": Ti(), "run_id": "r"}, event)
    promote = PromoteReleaseOperator(task_id="promote", timeout_s=1200)
    with pytest.raises(DeployError, match="deploy_timeout_s = 1200 s: raise that Param"):
        promote.execute_complete({"ti": Ti(), "run_id": "r"}, event)


def test_a_long_deferred_wait_keeps_the_runs_writer_lease_for_it(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Nobody renews the lease while the triggerer waits: a deploy_timeout_s over the lease's TTL would let another
    run write the cluster mid-wait. Before deferring, the lease is kept for the wait plus the TTL."""
    import json
    import time
    from types import SimpleNamespace

    from raylift.config import RELEASE_LEASE_TTL_S
    from raylift.operators.deploy import ServeDeployOperator
    from raylift.operators.lease import AcquireClusterLeaseSensor
    from raylift.release.writer import cluster_lease

    monkeypatch.setenv("AIRFLOW_CONN_DEV", json.dumps({"conn_type": "raylift_cluster", "extra": {
        "kind": "ray", "dashboard_url": "http://127.0.0.1:18265", "serve_url": "http://127.0.0.1:18000",
        "model_store": str(tmp_path / "store")}}))
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
    context = {"run_id": "run-a", "dag_run": SimpleNamespace(dag_id="raylift_deploy"), "ti": Ti()}
    held = AcquireClusterLeaseSensor(task_id="acquire_cluster_lease", cluster_conn_id="dev").poke(context)
    assert held
    op = ServeDeployOperator(task_id="deploy", artifact={}, model={}, cluster_conn_id="dev", timeout_s=5400,
                             holds_release_lease=True, release_lease=held.xcom_value)
    op.pre_execute(context)
    op.keep_lease_while_deferred(5400)
    lease = cluster_lease(op.target_impl).current()
    assert lease is not None and lease.holder == "raylift_deploy/run-a"
    assert lease.expires_at - time.time() > 5400 + RELEASE_LEASE_TTL_S - 60
    op.post_execute(context)
