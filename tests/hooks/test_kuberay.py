"""KubeRayHook against the Kubernetes API stand-in on 127.0.0.1, reached through an Airflow connection."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from raylift.errors import KubernetesApiError, ManifestValidationError
from raylift.hooks.kuberay import KubeRayHook, RayServiceStatus, rayservice_status
from raylift.kuberay.manifest import render_rayservice
from tests.fixtures.kube_api import APPLY_CONTENT_TYPE, KubeApiStandIn, kube_api  # noqa: F401 - fixture
from tests.kuberay.serve_configs import serve_config


def manifest(model: str = "tiny-llm", workers: int = 1) -> dict:
    return render_rayservice(
        name="llm", namespace="raylift", serve_config=serve_config(model=model), image="raylift:1",
        profile="gpu-vllm", workers=workers, hf_home="/mnt/models", hf_token_secret="hf-token",
    )  # fmt: skip


def test_apply_is_server_side_apply_with_raylift_field_manager(kube_api: KubeApiStandIn) -> None:
    obj = KubeRayHook().apply_rayservice(manifest())
    assert obj["metadata"]["generation"] == 1
    method, path, content_type = kube_api.requests[-1]
    assert (method, content_type) == ("PATCH", APPLY_CONTENT_TYPE)
    assert path.startswith("/apis/ray.io/v1/namespaces/raylift/rayservices/llm?")
    query = parse_qs(urlsplit(path).query)
    assert query["fieldManager"] == ["raylift"] and query["force"][0].lower() == "true"
    stored = kube_api.stored("raylift", "llm")
    assert stored["spec"] == manifest()["spec"]
    assert stored["metadata"]["managedFields"][0]["manager"] == "raylift"


def test_the_api_server_refuses_a_misspelt_field_because_raylift_asks_for_strict_validation(
    kube_api: KubeApiStandIn,
) -> None:
    bad = manifest()
    bad["spec"]["rayClusterConfig"]["workerGroupSpec"] = []  # typo of workerGroupSpecs
    with pytest.raises(ManifestValidationError, match=r"spec\.rayClusterConfig.*workerGroupSpec.*nothing was applied"):
        KubeRayHook().apply_rayservice(bad)
    assert parse_qs(urlsplit(kube_api.requests[-1][1]).query)["fieldValidation"] == ["Strict"]
    assert kube_api.stored("raylift", "llm") is None


def test_a_dry_run_is_validated_by_the_server_and_changes_nothing(kube_api: KubeApiStandIn) -> None:
    hook = KubeRayHook()
    hook.apply_rayservice(manifest())
    before = kube_api.stored("raylift", "llm")
    returned = hook.apply_rayservice(manifest(workers=3), dry_run=True)
    assert returned["spec"] == manifest(workers=3)["spec"]
    assert parse_qs(urlsplit(kube_api.requests[-1][1]).query)["dryRun"] == ["All"]
    assert kube_api.stored("raylift", "llm") == before
    bad = manifest()
    bad["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] = "two"
    with pytest.raises(ManifestValidationError, match=r"replicas"):
        hook.apply_rayservice(bad, dry_run=True)


def test_reapplying_the_same_spec_keeps_the_generation(kube_api: KubeApiStandIn) -> None:
    hook = KubeRayHook()
    hook.apply_rayservice(manifest())
    assert hook.apply_rayservice(manifest())["metadata"]["generation"] == 1
    assert hook.apply_rayservice(manifest(workers=2))["metadata"]["generation"] == 2


def test_get_returns_none_when_absent_and_the_object_when_present(kube_api: KubeApiStandIn) -> None:
    hook = KubeRayHook()
    assert hook.get_rayservice("llm", "raylift") is None
    hook.apply_rayservice(manifest())
    got = hook.get_rayservice("llm", "raylift")
    assert got is not None and got["spec"]["serveConfigV2"] == manifest()["spec"]["serveConfigV2"]


def test_delete_is_idempotent(kube_api: KubeApiStandIn) -> None:
    hook = KubeRayHook()
    hook.apply_rayservice(manifest())
    assert hook.delete_rayservice("llm", "raylift") is True
    assert kube_api.stored("raylift", "llm") is None
    assert hook.delete_rayservice("llm", "raylift") is False


def test_rollback_reapplies_the_previous_spec(kube_api: KubeApiStandIn) -> None:
    hook = KubeRayHook()
    hook.apply_rayservice(manifest(model="model-a"))
    kube_api.script_status("raylift", "llm", [{"serviceStatus": "Running", "observedGeneration": 1}])
    previous = hook.get_rayservice("llm", "raylift")  # as read back, with status and server fields
    hook.apply_rayservice(manifest(model="model-b", workers=3))
    assert "model-b" in kube_api.stored("raylift", "llm")["spec"]["serveConfigV2"]

    hook.rollback_rayservice(previous)

    stored = kube_api.stored("raylift", "llm")
    assert stored["spec"] == manifest(model="model-a")["spec"]
    assert yaml.safe_load(stored["spec"]["serveConfigV2"])["applications"][0]["args"]["model_id"] == "model-a"
    assert stored["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] == 1
    assert stored["metadata"]["generation"] == 3
    _, _, content_type = kube_api.requests[-1]
    assert content_type == APPLY_CONTENT_TYPE


def test_api_refusal_is_a_specific_error_without_the_token(kube_api: KubeApiStandIn, monkeypatch) -> None:
    config = kube_api.kubeconfig()
    config["users"][0]["user"]["token"] = "wrong-token"
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config": config}}),
    )
    with pytest.raises(KubernetesApiError, match="HTTP 401") as info:
        KubeRayHook().apply_rayservice(manifest())
    assert "wrong-token" not in str(info.value)


def test_hook_accepts_a_kubeconfig_dict(kube_api: KubeApiStandIn, monkeypatch) -> None:
    no_kubeconfig = json.dumps({"conn_type": "kubernetes"})
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", no_kubeconfig)
    hook = KubeRayHook(config_dict=kube_api.kubeconfig())
    hook.apply_rayservice(manifest())
    assert hook.get_rayservice("llm", "raylift")["kind"] == "RayService"


# -- rayservice_status (pure) ------------------------------------------------------------------


def _obj(status: dict, generation: int = 1) -> dict:
    return {"metadata": {"name": "llm", "generation": generation}, "status": status}


def test_status_ready_condition_and_active_apps() -> None:
    got = rayservice_status(
        _obj(
            {
                "observedGeneration": 1,
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "NonZeroServeEndpoints", "message": "ok"}
                ],
                "activeServiceStatus": {"applicationStatuses": {"llm": {"status": "RUNNING"}}},
            }
        )
    )
    assert got == RayServiceStatus(
        ready=True, app_statuses={"llm": "RUNNING"}, message="ok", app_messages={"llm": ""}
    )
    assert got.all_running(["llm"]) and not got.all_running(["llm", "other"])


def test_status_old_service_status_field() -> None:
    got = rayservice_status(
        _obj(
            {
                "serviceStatus": "Running",
                "activeServiceStatus": {"applicationStatuses": {"llm": {"status": "RUNNING"}}},
            }
        )
    )
    assert got.ready and got.message == "Running"
    assert not rayservice_status(_obj({"serviceStatus": "WaitForServeDeploymentReady"})).ready


def test_status_not_ready_while_upgrade_pending_or_generation_unobserved() -> None:
    pending = rayservice_status(
        _obj(
            {
                "conditions": [{"type": "Ready", "status": "True", "reason": "R", "message": ""}],
                "activeServiceStatus": {"applicationStatuses": {"llm": {"status": "RUNNING"}}},
                "pendingServiceStatus": {
                    "rayClusterName": "llm-raycluster-new",
                    "applicationStatuses": {"llm": {"status": "DEPLOY_FAILED", "message": "boom"}},
                },
            }
        )
    )
    assert not pending.ready and pending.upgrading
    assert pending.failed_apps(["llm"]) == {"llm": "boom"}  # the pending cluster's failure wins
    stale = rayservice_status(
        _obj({"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}, generation=2)
    )
    assert not stale.ready and not stale.observed


def test_status_failure_message_falls_back_to_the_deployment_message() -> None:
    got = rayservice_status(
        _obj(
            {
                "activeServiceStatus": {
                    "applicationStatuses": {
                        "llm": {
                            "status": "UNHEALTHY",
                            "serveDeploymentStatuses": {
                                "LLMServer": {"status": "UNHEALTHY", "message": "OOM"}
                            },
                        }
                    }
                }
            }
        )
    )
    assert got.failed_apps() == {"llm": "LLMServer: OOM"}
    assert rayservice_status(None) == RayServiceStatus(ready=False, message="RayService not found")


def test_a_change_since_raylifts_read_is_a_conflict_never_an_overwrite(kube_api: KubeApiStandIn) -> None:
    """The write carries the resourceVersion raylift read: another writer's apply in between makes it a 409."""
    from raylift.hooks.kuberay import RayServiceConflictError

    hook = KubeRayHook()
    hook.apply_rayservice(manifest(model="model-a"))
    read = hook.get_rayservice("llm", "raylift")
    hook.apply_rayservice(manifest(model="by-hand"))  # someone else, after raylift's read
    with pytest.raises(RayServiceConflictError, match="changed since raylift read it") as err:
        hook.apply_rayservice(manifest(model="model-b"), resource_version=read["metadata"]["resourceVersion"])
    assert err.value.status == 409
    assert "by-hand" in kube_api.stored("raylift", "llm")["spec"]["serveConfigV2"]
    # read again, write again: it goes through
    fresh = hook.get_rayservice("llm", "raylift")["metadata"]["resourceVersion"]
    hook.apply_rayservice(manifest(model="model-b"), resource_version=fresh)
    assert "model-b" in kube_api.stored("raylift", "llm")["spec"]["serveConfigV2"]
