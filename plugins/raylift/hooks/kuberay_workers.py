"""The Kubernetes calls of an EKS scale-in (``raylift.kuberay.drain`` says why each is shaped so): the RayService's
active RayCluster, its Ray pods, the drain Job, and the RayCluster patch that has KubeRay delete the drained pods.

Functions over the EKS target's ``KubeRayHook`` (the cncf provider's ``KubernetesHook``: its typed clients, the
connection or EKS token it was built with), so no second client or credential path exists.
"""

from __future__ import annotations

from typing import Any

from raylift.errors import ClusterError, KubernetesApiError
from raylift.kuberay.drain import NODE_TYPE_LABEL, RAY_CLUSTER_LABEL, RayPod, ray_pods
from raylift.kuberay.manifest import GROUP, VERSION

RAYCLUSTERS = "rayclusters"
JSON_PATCH = "application/json-patch+json"


def _api_exception() -> Any:
    from kubernetes.client.exceptions import ApiException

    return ApiException


def _refused(what: str, err: Any, todo: str) -> KubernetesApiError:
    from raylift.hooks.kuberay import _api_message

    return KubernetesApiError(f"Kubernetes refused to {what}: HTTP {err.status}: {_api_message(err)}. {todo}",
                              status=getattr(err, "status", None))


def active_cluster(hook: Any, namespace: str, rayservice: str) -> dict[str, Any]:
    """The RayCluster the RayService serves from (``status.activeServiceStatus.rayClusterName``). ClusterError
    while an upgrade runs (a pending cluster): which cluster keeps the workers is not settled then."""
    obj = hook.get_rayservice(rayservice, namespace)
    status = (obj or {}).get("status") or {}
    name = (status.get("activeServiceStatus") or {}).get("rayClusterName")
    pending = (status.get("pendingServiceStatus") or {}).get("rayClusterName")
    if not name:
        raise ClusterError(f"RayService {namespace}/{rayservice} has no active RayCluster yet: nothing to scale in. "
                           "Run the deploy first, or wait until it is Ready.")
    if pending:
        raise ClusterError(f"RayService {namespace}/{rayservice} is upgrading (pending RayCluster {pending}): scale "
                           "in after the upgrade finishes. Nothing was changed.")
    try:
        cluster: dict[str, Any] = hook.custom_object_client.get_namespaced_custom_object(
            group=GROUP, version=VERSION, namespace=namespace, plural=RAYCLUSTERS, name=name)
    except _api_exception() as err:
        raise _refused(f"get RayCluster {namespace}/{name}", err,
                       "Check RBAC on rayclusters.ray.io (get, patch) for the Airflow role.") from None
    return cluster


def cluster_pod_items(hook: Any, namespace: str, cluster: str) -> list[dict[str, Any]]:
    """The RayCluster's Ray pods (KubeRay's ``ray.io/cluster`` label), head included, as the API lists them."""
    try:
        pods = hook.core_v1_client.list_namespaced_pod(
            namespace, label_selector=f"{RAY_CLUSTER_LABEL}={cluster},{NODE_TYPE_LABEL} in (head,worker)")
    except _api_exception() as err:
        raise _refused(f"list the pods of RayCluster {namespace}/{cluster}", err,
                       "Check RBAC on pods (list) for the Airflow role.") from None
    items: list[dict[str, Any]] = hook.api_client.sanitize_for_serialization(pods).get("items") or []
    return items


def cluster_pods(hook: Any, namespace: str, cluster: str) -> list[RayPod]:
    """The RayCluster's Ray pods (KubeRay's ``ray.io/cluster`` label), head included."""
    return ray_pods(cluster_pod_items(hook, namespace, cluster))


def create_job(hook: Any, manifest: dict[str, Any]) -> bool:
    """POST the Job; False when one of that name exists already (a retried step: wait on that one)."""
    meta = manifest["metadata"]
    try:
        hook.batch_v1_client.create_namespaced_job(namespace=meta["namespace"], body=manifest)
    except _api_exception() as err:
        if err.status == 409:
            return False
        raise _refused(f"create Job {meta['namespace']}/{meta['name']}", err,
                       "Check RBAC on jobs.batch (create, get) and pods (list) for the Airflow role; nothing was "
                       "drained or removed.") from None
    return True


def patch_cluster(hook: Any, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
    """Apply the JSON Patch ``ops`` to RayCluster ``namespace/name``; its ``test`` ops make a concurrent change a
    refusal (422), never an overwrite."""
    try:
        hook.custom_object_client.patch_namespaced_custom_object(
            group=GROUP, version=VERSION, namespace=namespace, plural=RAYCLUSTERS, name=name, body=ops,
            _content_type=JSON_PATCH)
    except _api_exception() as err:
        raise _refused(f"patch RayCluster {namespace}/{name}'s worker groups", err,
                       "The Ray nodes are drained but their pods and instances were kept; if Ray's autoscaler "
                       "changed the worker group meanwhile, run the scale step again.") from None
