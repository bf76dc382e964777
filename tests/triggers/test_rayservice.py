"""RayServiceReadyTrigger against the Kubernetes API stand-in: success, failure, timeout, one event each."""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
import time

import pytest

from raylift.hooks.kuberay import KubeRayHook
from raylift.kuberay.eks_auth import eks_cluster_context
from raylift.kuberay.manifest import render_rayservice
from raylift.triggers.rayservice import RayServiceReadyTrigger
from tests.fixtures.kube_api import KubeApiStandIn, kube_api  # noqa: F401 - fixture
from tests.kuberay.serve_configs import serve_config

NS, NAME = "raylift", "llm"


def apply() -> None:
    KubeRayHook().apply_rayservice(
        render_rayservice(
            name=NAME, namespace=NS, serve_config=serve_config(), image="raylift:1", profile="gpu-vllm",
            workers=1,
        )
    )


def trigger(**kwargs) -> RayServiceReadyTrigger:
    args = dict(name=NAME, namespace=NS, kubernetes_conn_id="kubernetes_default", app_names=["llm"],
                timeout_s=60.0, poll_interval_s=0.05, cluster_context=None)  # fmt: skip (60 s: a loaded box)
    args.update(kwargs)
    return RayServiceReadyTrigger(**args)


def events(trig: RayServiceReadyTrigger) -> list[dict]:
    """The trigger's events, each checked for and stripped of ``seen_at`` (when the wait saw it)."""

    async def collect() -> list[dict]:
        return [event.payload async for event in trig.run()]

    started = time.time()
    payloads = asyncio.run(asyncio.wait_for(collect(), timeout=30))
    for payload in payloads:
        assert started <= payload.pop("seen_at") <= time.time(), payload
    return payloads


def condition(ready: bool, reason: str, message: str = "") -> dict:
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def apps(state: str, message: str = "") -> dict:
    return {"applicationStatuses": {"llm": {"status": state, "message": message}}}


PREPARING = {
    "observedGeneration": "$generation",
    "conditions": [condition(False, "Initializing")],
    "pendingServiceStatus": {"rayClusterName": "llm-raycluster-abc12", **apps("DEPLOYING")},
}
DEPLOYING = {
    "observedGeneration": "$generation",
    "conditions": [condition(False, "Initializing")],
    "activeServiceStatus": {"rayClusterName": "llm-raycluster-abc12", **apps("DEPLOYING")},
}
READY = {
    "observedGeneration": "$generation",
    "conditions": [condition(True, "NonZeroServeEndpoints")],
    "activeServiceStatus": {"rayClusterName": "llm-raycluster-abc12", **apps("RUNNING")},
}


def test_apply_then_ready_fires_one_success_event(kube_api: KubeApiStandIn) -> None:
    apply()
    kube_api.script_status(NS, NAME, [PREPARING, DEPLOYING, DEPLOYING, READY])
    success = {"status": "success", "apps": {"llm": "RUNNING"}, "name": NAME, "namespace": NS,
               "message": "RayService raylift/llm ready"}  # every event has a message (triggers.polling)
    assert events(trigger()) == [success]
    gets = [r for r in kube_api.requests if r[0] == "GET"]
    assert len(gets) == 4  # it waited through every scripted state


def test_stale_ready_status_of_the_previous_generation_is_not_success(kube_api: KubeApiStandIn) -> None:
    apply()
    stale = dict(READY, observedGeneration=0)  # operator has not seen this spec yet
    kube_api.script_status(NS, NAME, [stale, stale, READY])
    assert events(trigger())[0]["status"] == "success"
    assert len([r for r in kube_api.requests if r[0] == "GET"]) == 3


def test_never_ready_fires_timeout(kube_api: KubeApiStandIn) -> None:
    apply()
    kube_api.script_status(NS, NAME, [DEPLOYING])
    (event,) = events(trigger(timeout_s=0.4, poll_interval_s=0.1))
    assert event["status"] == "timeout"
    assert event["apps"] == {"llm": "DEPLOYING"}
    assert "raylift/llm not ready after 0.4s" in event["message"]


def test_missing_rayservice_times_out_saying_so(kube_api: KubeApiStandIn) -> None:
    (event,) = events(trigger(timeout_s=0.2, poll_interval_s=0.1))
    assert event["status"] == "timeout"
    assert "RayService not found" in event["message"]


def test_deploy_failed_fires_failed_with_serves_message(kube_api: KubeApiStandIn) -> None:
    apply()
    serve_error = "Failed to deploy: ValueError: model 'tiny-llm' not found under /mnt/models"
    failed = {
        "observedGeneration": "$generation",
        "conditions": [condition(False, "Initializing")],
        "pendingServiceStatus": {
            "rayClusterName": "llm-raycluster-abc12",
            **apps("DEPLOY_FAILED", serve_error),
        },
    }
    kube_api.script_status(NS, NAME, [PREPARING, failed])
    (event,) = events(trigger())
    assert event["status"] == "failed"
    assert event["message"] == serve_error
    assert event["apps"] == {"llm": "DEPLOY_FAILED"}


def test_unhealthy_fires_failed_with_the_deployment_message(kube_api: KubeApiStandIn) -> None:
    apply()
    unhealthy = dict(READY)
    unhealthy["activeServiceStatus"] = {
        "applicationStatuses": {
            "llm": {
                "status": "UNHEALTHY",
                "serveDeploymentStatuses": {
                    "LLMServer": {"status": "UNHEALTHY", "message": "replica OOM-killed"}
                },
            }
        }
    }
    kube_api.script_status(NS, NAME, [unhealthy])
    (event,) = events(trigger())
    assert event == {
        "status": "failed",
        "message": "LLMServer: replica OOM-killed",
        "apps": {"llm": "UNHEALTHY"},
        "failed_apps": {"llm": "LLMServer: replica OOM-killed"},
    }


def test_rejected_credentials_fail_fast(kube_api: KubeApiStandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    config = kube_api.kubeconfig()
    config["users"][0]["user"]["token"] = "expired-token"
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config": config}}),
    )
    (event,) = events(trigger(timeout_s=30))
    assert event["status"] == "failed"
    assert "HTTP 401" in event["message"] and "expired-token" not in event["message"]


def test_serialize_round_trip() -> None:
    original = trigger(cluster_context=eks_cluster_context("raylift", "us-west-2"))
    path, kwargs = original.serialize()
    json.dumps(kwargs)  # JSON-serialisable, as the triggerer stores it
    module, _, cls_name = path.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), cls_name)(**json.loads(json.dumps(kwargs)))
    assert path == "raylift.triggers.rayservice.RayServiceReadyTrigger"
    assert rebuilt.serialize() == original.serialize()


def test_eks_cluster_context_builds_a_token_kubeconfig_inside_run(aws: str) -> None:
    import boto3

    eks = boto3.client("eks", endpoint_url=aws, region_name="us-west-2")
    eks.create_cluster(name="raylift", roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig={})
    endpoint = eks.describe_cluster(name="raylift")["cluster"]["endpoint"]
    trig = trigger(cluster_context=eks_cluster_context("raylift", "us-west-2", "aws_default"))

    hook = asyncio.run(trig._async_hook())

    assert hook.config_dict["clusters"][0]["cluster"]["server"] == endpoint
    assert hook.config_dict["users"][0]["user"]["token"].startswith("k8s-aws-v1.")
    assert "k8s-aws-v1" not in json.dumps(trig.serialize())  # credentials are built, never serialised


def test_trigger_and_manifest_modules_import_no_heavy_clients() -> None:
    """DAG-facing imports stay light: kubernetes / boto3 load only inside run() or the hook."""
    code = (
        "import sys, raylift.triggers.rayservice, raylift.kuberay.manifest, raylift.kuberay.status;"
        "print(sorted(m for m in ('kubernetes', 'kubernetes_asyncio', 'boto3', 'ray') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_wait_in_process_reads_the_same_condition_with_the_sync_client(kube_api: KubeApiStandIn) -> None:
    """An operator that does not defer: wait() blocks on the same rules through the sync KubeRayHook."""
    apply()
    kube_api.script_status(NS, NAME, [PREPARING, DEPLOYING, READY])
    event = trigger().wait()
    assert event["status"] == "success" and event["apps"] == {"llm": "RUNNING"}, event
    assert len([r for r in kube_api.requests if r[0] == "GET"]) == 3


def test_wait_in_process_fails_fast_on_rejected_credentials(
    kube_api: KubeApiStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = kube_api.kubeconfig()
    config["users"][0]["user"]["token"] = "expired-token"
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config": config}}),
    )
    started = time.monotonic()
    event = trigger(timeout_s=30).wait()
    assert event["status"] == "failed" and event["reason"] == "auth", event
    assert "HTTP 401" in event["message"] and "expired-token" not in event["message"]
    assert time.monotonic() - started < 10
