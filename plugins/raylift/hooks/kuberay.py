"""KubeRay RayService hook: server-side apply, get, delete, and reading a RayService's status.

Built on the cncf-kubernetes provider's ``KubernetesHook`` (its connection handling and ApiClient);
only the RayService calls and the status reading are ours.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

from raylift.errors import KubernetesApiError, RayliftValueError
from raylift.kuberay.manifest import FIELD_MANAGER, GROUP, KIND, PLURAL, VERSION, to_apply_config

if TYPE_CHECKING:
    from kubernetes.client.exceptions import ApiException

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"


class AppStatus:
    """Serve application states as KubeRay copies them from Serve (``applicationStatuses[*].status``)."""

    NOT_STARTED = "NOT_STARTED"
    DEPLOYING = "DEPLOYING"
    RUNNING = "RUNNING"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    UNHEALTHY = "UNHEALTHY"
    DELETING = "DELETING"

    FAILED_STATES = frozenset({DEPLOY_FAILED, UNHEALTHY})


@dataclass(frozen=True)
class RayServiceStatus:
    """What a RayService reports, reduced to what a deploy wait needs.

    ``ready``: the Ready condition is True (or, for KubeRay < 1.3, ``serviceStatus == "Running"``),
    the operator has seen the current spec, and no upgrade is pending. ``app_statuses`` and
    ``app_messages`` come from the cluster serving traffic, overlaid by the pending cluster's while a
    new-cluster upgrade is in flight (that is where a new config fails).
    """

    ready: bool
    app_statuses: dict[str, str] = field(default_factory=dict)
    message: str = ""
    app_messages: dict[str, str] = field(default_factory=dict)
    upgrading: bool = False
    observed: bool = True  # status.observedGeneration caught up with metadata.generation

    def failed_apps(self, names: list[str] | None = None) -> dict[str, str]:
        """``{app: message}`` for apps (of ``names``, or all) in DEPLOY_FAILED / UNHEALTHY."""
        return {
            app: self.app_messages.get(app) or state
            for app, state in self.app_statuses.items()
            if state in AppStatus.FAILED_STATES and (names is None or app in names)
        }

    def all_running(self, names: list[str]) -> bool:
        return all(self.app_statuses.get(app) == AppStatus.RUNNING for app in names)


def rayservice_status(obj: dict[str, Any] | None) -> RayServiceStatus:
    """Read ``status.conditions[type=Ready]``, ``active/pendingServiceStatus`` and ``serviceStatus``."""
    if not obj:
        return RayServiceStatus(ready=False, message="RayService not found")
    status = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation")
    observed_generation = status.get("observedGeneration")
    observed = generation is None or observed_generation is None or observed_generation >= generation

    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    upgrading = (conditions.get("UpgradeInProgress") or {}).get("status") == "True"
    pending = status.get("pendingServiceStatus") or {}
    if pending.get("rayClusterName"):
        upgrading = True
    if "Ready" in conditions:
        ready_condition = conditions["Ready"]
        ready = ready_condition.get("status") == "True"
        message = ready_condition.get("message") or ready_condition.get("reason") or ""
    else:  # KubeRay < 1.3 has no conditions, only serviceStatus
        ready = status.get("serviceStatus") == "Running"
        message = status.get("serviceStatus") or ""

    app_statuses: dict[str, str] = {}
    app_messages: dict[str, str] = {}
    for source in (status.get("activeServiceStatus") or {}, pending):
        for app, info in (source.get("applicationStatuses") or {}).items():
            app_statuses[app] = info.get("status", "")
            app_messages[app] = _app_message(info)
    return RayServiceStatus(
        ready=ready and observed and not upgrading,
        app_statuses=app_statuses,
        message=message,
        app_messages=app_messages,
        upgrading=upgrading,
        observed=observed,
    )


def _app_message(info: dict[str, Any]) -> str:
    """The app's own message, else the first failing deployment's (Serve puts the traceback there)."""
    if info.get("message"):
        return str(info["message"])
    for deployment, dep in (info.get("serveDeploymentStatuses") or {}).items():
        if dep.get("message"):
            return f"{deployment}: {dep['message']}"
    return ""


class KubeRayHook(KubernetesHook):
    """RayService CRUD over the provider's Kubernetes connection.

    :param kubernetes_conn_id: Airflow connection (kubeconfig in ``kube_config``/``kube_config_path``,
        or ``in_cluster``).
    :param in_cluster: override the connection's ``in_cluster``.
    :param config_dict: a kubeconfig as a dict (e.g. built for EKS by ``raylift.kuberay.eks_auth``).
    """

    hook_name = "raylift KubeRay"

    def __init__(
        self,
        kubernetes_conn_id: str = "kubernetes_default",
        *,
        in_cluster: bool | None = None,
        config_dict: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(kubernetes_conn_id=kubernetes_conn_id, in_cluster=in_cluster, config_dict=config_dict)

    def apply_rayservice(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply (``fieldManager=raylift``, ``force``): create or update; returns the object."""
        meta = manifest.get("metadata") or {}
        if manifest.get("kind") != KIND or not meta.get("name") or not meta.get("namespace"):
            raise RayliftValueError(
                "apply_rayservice needs a RayService manifest with metadata.name and metadata.namespace."
            )
        self.log.info("Applying RayService %s/%s", meta["namespace"], meta["name"])
        try:
            # Raw response: the generated client maps only HTTP 200 to a body, but an apply that
            # creates the object answers 201 Created.
            response = self.custom_object_client.patch_namespaced_custom_object(
                group=GROUP,
                version=VERSION,
                namespace=meta["namespace"],
                plural=PLURAL,
                name=meta["name"],
                body=manifest,
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type=APPLY_CONTENT_TYPE,
                _preload_content=False,
            )
        except _api_exception() as err:
            raise _api_error("apply", meta["namespace"], meta["name"], err) from None
        return json.loads(response.data)

    def rollback_rayservice(self, previous: dict[str, Any]) -> dict[str, Any]:
        """Re-apply a previously read RayService's spec (status and server fields dropped)."""
        return self.apply_rayservice(to_apply_config(previous))

    def get_rayservice(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The RayService object, or None when it does not exist."""
        try:
            return self.custom_object_client.get_namespaced_custom_object(
                group=GROUP, version=VERSION, namespace=namespace, plural=PLURAL, name=name
            )
        except _api_exception() as err:
            if err.status == 404:
                return None
            raise _api_error("get", namespace, name, err) from None

    def delete_rayservice(self, name: str, namespace: str) -> bool:
        """Delete the RayService (KubeRay then removes its clusters); False when it was already gone."""
        self.log.info("Deleting RayService %s/%s", namespace, name)
        try:
            self.custom_object_client.delete_namespaced_custom_object(
                group=GROUP, version=VERSION, namespace=namespace, plural=PLURAL, name=name
            )
        except _api_exception() as err:
            if err.status == 404:
                return False
            raise _api_error("delete", namespace, name, err) from None
        return True


def _api_exception() -> type[ApiException]:
    from kubernetes.client.exceptions import ApiException

    return ApiException


def _api_error(verb: str, namespace: str, name: str, err: Any) -> KubernetesApiError:
    """The API's own Status message (never the request headers, which carry the token)."""
    reason = getattr(err, "reason", "") or ""
    try:
        body = json.loads(err.body or "{}")
        reason = body.get("message") or reason
    except (TypeError, ValueError):
        pass
    return KubernetesApiError(
        f"Kubernetes refused to {verb} RayService {namespace}/{name}: HTTP {err.status}: {reason}. "
        "Check the connection's cluster, credentials (RBAC on rayservices.ray.io) and that KubeRay is installed."
    )
