"""KubeRay RayService hook: server-side apply, get, delete (rollback = re-apply a previous spec).

Built on the cncf-kubernetes provider's ``KubernetesHook`` (its connection handling and ApiClient);
only the RayService calls are ours. Status reading is pure and lives in ``raylift.kuberay.status``
(re-exported here) so the trigger module can use it without importing the kubernetes client.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

from raylift.errors import KubernetesApiError, ManifestValidationError, RayliftValueError
from raylift.kuberay.manifest import FIELD_MANAGER, GROUP, KIND, PLURAL, VERSION, to_apply_config
from raylift.kuberay.status import AppStatus, RayServiceStatus, rayservice_status

if TYPE_CHECKING:
    from kubernetes.client.exceptions import ApiException

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
GATEWAY_GROUP, GATEWAY_VERSION = "gateway.networking.k8s.io", "v1"

__all__ = ["APPLY_CONTENT_TYPE", "AppStatus", "KubeRayHook", "RayServiceStatus", "rayservice_status"]


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
        kubernetes_conn_id: str | None = "kubernetes_default",
        *,
        in_cluster: bool | None = None,
        config_dict: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            kubernetes_conn_id=kubernetes_conn_id, in_cluster=in_cluster, config_dict=config_dict
        )

    def apply_rayservice(
        self, manifest: dict[str, Any], *, dry_run: bool = False, resource_version: str | None = None
    ) -> dict[str, Any]:
        """Server-side apply (``fieldManager=raylift``, ``force``): create or update; returns the object.

        The API server validates against the installed KubeRay CRD with ``fieldValidation=Strict``, so a
        misspelt field is refused rather than silently dropped. ``dry_run``: validate only, change nothing
        (the deploy checks a manifest this way before it records or replaces anything). ``resource_version``:
        the object as raylift read it; the API server refuses the apply (409, RayServiceConflictError) when
        anyone changed it since, so a concurrent change is a conflict, never overwritten (``force`` only takes
        over field ownership).
        """
        meta = manifest.get("metadata") or {}
        if resource_version is not None:
            manifest = {**manifest, "metadata": {**meta, "resourceVersion": resource_version}}
        if manifest.get("kind") != KIND or not meta.get("name") or not meta.get("namespace"):
            raise RayliftValueError(
                "apply_rayservice needs a RayService manifest with metadata.name and metadata.namespace."
            )
        self.log.info("%s RayService %s/%s", "Validating" if dry_run else "Applying", meta["namespace"], meta["name"])
        extra = {"dry_run": "All"} if dry_run else {}
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
                field_validation="Strict",
                _content_type=APPLY_CONTENT_TYPE,
                _preload_content=False,
                **extra,
            )
        except _api_exception() as err:
            if err.status == 409 and resource_version is not None:
                raise RayServiceConflictError(
                    f"RayService {meta['namespace']}/{meta['name']} changed since raylift read it (resourceVersion "
                    f"{resource_version}): {_api_message(err)}. Nothing was applied, so that change is kept; run "
                    "this step again to build on it.",
                    status=409,
                ) from None
            if err.status in (400, 422):  # the manifest, not the cluster: name the field the server named
                raise ManifestValidationError(
                    f"The Kubernetes API refused RayService {meta['namespace']}/{meta['name']}: "
                    f"{_api_message(err)}. Fix that field in the profile or the render arguments; "
                    "nothing was applied."
                ) from None
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

    # -- Gateway API: KubeRay's Gateway (read) and the release's per-arm HTTPRoutes (raylift.targets.eks_blue_green)
    def get_gateway_object(self, plural: str, name: str, namespace: str) -> dict[str, Any] | None:
        """A ``gateway.networking.k8s.io/v1`` object (``plural`` "gateways" or "httproutes"), or None when absent."""
        try:
            obj: dict[str, Any] = self.custom_object_client.get_namespaced_custom_object(
                group=GATEWAY_GROUP, version=GATEWAY_VERSION, namespace=namespace, plural=plural, name=name)
        except _api_exception() as err:
            if err.status == 404:
                return None
            raise _gateway_api_error("get", plural, namespace, name, err) from None
        return obj

    def apply_httproute(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply of an HTTPRoute (``fieldManager=raylift``, ``force``, strict field validation)."""
        meta = manifest["metadata"]
        try:
            response = self.custom_object_client.patch_namespaced_custom_object(
                group=GATEWAY_GROUP, version=GATEWAY_VERSION, namespace=meta["namespace"], plural="httproutes",
                name=meta["name"], body=manifest, field_manager=FIELD_MANAGER, force=True,
                field_validation="Strict", _content_type=APPLY_CONTENT_TYPE, _preload_content=False)
        except _api_exception() as err:
            raise _gateway_api_error("apply", "httproutes", meta["namespace"], meta["name"], err) from None
        result: dict[str, Any] = json.loads(response.data)
        return result

    def delete_httproute(self, name: str, namespace: str) -> bool:
        """Delete an HTTPRoute; False when it was already gone."""
        try:
            self.custom_object_client.delete_namespaced_custom_object(
                group=GATEWAY_GROUP, version=GATEWAY_VERSION, namespace=namespace, plural="httproutes", name=name)
        except _api_exception() as err:
            if err.status == 404:
                return False
            raise _gateway_api_error("delete", "httproutes", namespace, name, err) from None
        return True


def _api_exception() -> type[ApiException]:
    from kubernetes.client.exceptions import ApiException

    return ApiException


def _api_message(err: Any) -> str:
    """The API's own Status message (never the request headers, which carry the token)."""
    reason = getattr(err, "reason", "") or ""
    try:
        body = json.loads(err.body or "{}")
        reason = body.get("message") or reason
    except (TypeError, ValueError):
        pass
    return str(reason)


class RayServiceConflictError(KubernetesApiError):
    """The RayService changed between raylift's read and its write (the API server's 409 on resourceVersion)."""


def _api_error(verb: str, namespace: str, name: str, err: Any) -> KubernetesApiError:
    reason = _api_message(err)
    return KubernetesApiError(
        f"Kubernetes refused to {verb} RayService {namespace}/{name}: HTTP {err.status}: {reason}. "
        "Check the connection's cluster, credentials (RBAC on rayservices.ray.io) and that KubeRay "
        "is installed.",
        status=getattr(err, "status", None),
    )


def _gateway_api_error(verb: str, plural: str, namespace: str, name: str, err: Any) -> KubernetesApiError:
    return KubernetesApiError(
        f"Kubernetes refused to {verb} {plural}.{GATEWAY_GROUP} {namespace}/{name}: HTTP {err.status}: "
        f"{_api_message(err)}. Check that the Gateway API CRDs are installed (terraform's blue_green_gateway) and "
        f"that the connection's identity may {verb} {plural} in {namespace}.",
        status=getattr(err, "status", None),
    )
