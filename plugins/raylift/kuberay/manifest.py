"""Render a KubeRay ``ray.io/v1`` RayService from the same Serve config the local target deploys.

``serveConfigV2`` is the YAML dump of that Serve config dict (minus ``http_options.host/port``,
which KubeRay owns); ``rayClusterConfig`` comes from a node profile (``raylift.kuberay.profiles``).
No secrets enter the manifest: the HF token is a ``secretKeyRef``, and env values whose names look
like credentials are refused.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any, NamedTuple

from raylift import config
from raylift.errors import RayliftValueError
from raylift.kuberay.profiles import NODEGROUP_LABEL, NodeProfile, PodProfile, get_profile

API_VERSION = "ray.io/v1"
KIND = "RayService"
GROUP, VERSION, PLURAL = "ray.io", "v1", "rayservices"
FIELD_MANAGER = "raylift"

UPGRADE_STRATEGIES = ("NewCluster", "NewClusterWithIncrementalUpgrade", "None")
# NewClusterWithIncrementalUpgrade shifts traffic through a Gateway in steps; the new cluster grows
# by at most maxSurgePercent of the old one at a time (KubeRay's RayServiceIncrementalUpgrade gate). KubeRay builds
# that Gateway and its HTTPRoute from a GatewayClass the cluster must have: ``gateway_class`` names it (no default).
INCREMENTAL_UPGRADE_OPTIONS: dict[str, Any] = {
    "stepSizePercent": 25,
    "intervalSeconds": 60,
    "maxSurgePercent": 50,
}
INCREMENTAL_NEEDS_GATEWAY = (
    "upgrade_strategy 'NewClusterWithIncrementalUpgrade' needs gateway_class: the Gateway API GatewayClass KubeRay "
    "builds the Gateway and HTTPRoute from that split traffic between the old and new Ray clusters (and KubeRay's "
    "RayServiceIncrementalUpgrade feature gate on). Name a GatewayClass of a controller installed in the cluster, "
    "or use upgrade_strategy 'NewCluster' (two clusters' capacity) or 'None'."
)
HF_TOKEN_SECRET_KEY = "token"
MAX_NAME_LENGTH = 47  # KubeRay: 63 minus "-serve-svc" minus the 6-char cluster suffix
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL", re.I)
_KUBERAY_OWNED_HTTP_KEYS = ("host", "port")
_SERVE_PORT = 8000


class InvalidRayServiceError(RayliftValueError):
    """A render argument cannot make a valid RayService (name, workers, strategy, serve config)."""


class SecretInManifestError(RayliftValueError):
    """A value that looks like a credential was about to be written into a manifest."""


def render_rayservice(
    *,
    name: str,
    namespace: str,
    serve_config: dict[str, Any],
    image: str,
    profile: str,
    workers: int,
    env: dict[str, str] | None = None,
    hf_home: str | None = None,
    upgrade_strategy: str = "NewCluster",
    ray_version: str = config.RAY_VERSION,
    hf_token_secret: str | None = None,
    model_volume_claim: str | None = None,
    service_account: str | None = None,
    ray_auth_secret: str | None = None,
    gateway_class: str | None = None,
) -> dict[str, Any]:
    """A RayService manifest (plain dict, ready for server-side apply).

    :param serve_config: ``{"applications": [...], "http_options": ...}`` as deployed locally.
    :param profile: a name from ``raylift.kuberay.profiles.PROFILES``.
    :param workers: worker pods to run now (``replicas`` and ``minReplicas``; the autoscaler may add up
        to the profile's ``max_replicas``).
    :param env: plain, non-secret environment variables for every Ray container.
    :param hf_home: where models are read from inside the pods (``HF_HOME``), e.g. an S3 mount.
    :param hf_token_secret: name of a Kubernetes Secret whose ``token`` key becomes ``HF_TOKEN``.
    :param model_volume_claim: a PersistentVolumeClaim (e.g. bound to a Mountpoint-for-S3 CSI volume)
        mounted read-only at ``hf_home``.
    :param service_account: the Ray pods' ServiceAccount (e.g. the one EKS Pod Identity lets read the
        model bucket, so replicas can pull ``s3://`` models and working dirs).
    :param ray_auth_secret: a Kubernetes Secret (key ``auth_token``, terraform's ``ray-auth-token``): the cluster
        runs Ray's token auth (``authOptions.mode: token``, KubeRay >= 1.5.1 sets RAY_AUTH_MODE/RAY_AUTH_TOKEN on
        every Ray container and sends the token itself), so its dashboard and GCS refuse callers without it.
    :param gateway_class: the Gateway API GatewayClass KubeRay builds its Gateway and HTTPRoute from under
        ``NewClusterWithIncrementalUpgrade`` (``clusterUpgradeOptions.gatewayClassName``); required by that strategy.
    """
    node_profile = get_profile(profile)
    _check_name(name)
    if workers < 0:
        raise InvalidRayServiceError(f"workers must be >= 0, got {workers}.")
    if upgrade_strategy not in UPGRADE_STRATEGIES:
        raise InvalidRayServiceError(
            f"Unknown upgrade_strategy {upgrade_strategy!r}; choose one of {list(UPGRADE_STRATEGIES)}."
        )
    if model_volume_claim and not hf_home:
        raise InvalidRayServiceError("model_volume_claim needs hf_home: the path to mount the models at.")
    env_list = _env(node_profile, env or {}, hf_home, hf_token_secret)
    mounts = _model_volume(hf_home, model_volume_claim)
    pod = _PodExtras(mounts, service_account)

    upgrade = upgrade_strategy_spec(upgrade_strategy, gateway_class)

    worker_groups = []
    for group in node_profile.workers:
        worker_groups.append(
            {
                "groupName": group.group_name,
                "replicas": workers,
                "minReplicas": workers,
                "maxReplicas": max(workers, group.max_replicas),
                "rayStartParams": dict(group.pod.ray_start_params),
                "template": _pod_template(group.pod, image, "ray-worker", env_list, pod, head=False,
                                          nodegroup=node_profile.nodegroup),
            }
        )
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/managed-by": FIELD_MANAGER,
                "raylift.io/profile": node_profile.name,
            },
        },
        "spec": {
            "serveConfigV2": serve_config_v2(serve_config),
            "upgradeStrategy": upgrade,
            "rayClusterConfig": {
                "rayVersion": ray_version,
                "enableInTreeAutoscaling": True,
                "autoscalerOptions": {"upscalingMode": "Default", "idleTimeoutSeconds": 300},
                **({"authOptions": {"mode": "token", "secretName": ray_auth_secret}} if ray_auth_secret else {}),
                "headGroupSpec": {
                    "rayStartParams": dict(node_profile.head.ray_start_params),
                    "template": _pod_template(
                        node_profile.head, image, "ray-head", env_list, pod, head=True
                    ),
                },
                "workerGroupSpecs": worker_groups,
            },
        },
    }


def upgrade_strategy_spec(upgrade_strategy: str, gateway_class: str | None = None) -> dict[str, Any]:
    """``spec.upgradeStrategy`` for ``upgrade_strategy`` (the incremental upgrade's options with ``gateway_class``)."""
    if upgrade_strategy not in UPGRADE_STRATEGIES:
        raise InvalidRayServiceError(
            f"Unknown upgrade_strategy {upgrade_strategy!r}; choose one of {list(UPGRADE_STRATEGIES)}."
        )
    upgrade: dict[str, Any] = {"type": upgrade_strategy}
    if upgrade_strategy == "NewClusterWithIncrementalUpgrade":
        if not gateway_class:
            raise InvalidRayServiceError(INCREMENTAL_NEEDS_GATEWAY)
        upgrade["clusterUpgradeOptions"] = {"gatewayClassName": gateway_class, **INCREMENTAL_UPGRADE_OPTIONS}
    return upgrade


def serve_config_v2(serve_config: dict[str, Any]) -> str:
    """The Serve config as ``serveConfigV2`` YAML, without the HTTP host/port KubeRay sets itself."""
    import yaml

    cfg = copy.deepcopy(serve_config)
    apps = cfg.get("applications")
    if not isinstance(apps, list) or not apps:
        raise InvalidRayServiceError("serve_config needs a non-empty 'applications' list.")
    for app in apps:
        runtime_env = app.get("runtime_env") or {}
        working_dir = runtime_env.get("working_dir")
        if working_dir and "://" not in str(working_dir):
            raise InvalidRayServiceError(
                f"Application {app.get('name')!r} has a local working_dir {working_dir!r}; the cluster "
                "cannot read it. Build the artifact to s3:// (or bake it into the image as FILE:///...)."
            )
        for key in runtime_env.get("env_vars") or {}:
            _refuse_secret_name(key, where=f"application {app.get('name')!r} runtime_env.env_vars")
    http = cfg.get("http_options")
    if isinstance(http, dict):
        for key in _KUBERAY_OWNED_HTTP_KEYS:
            http.pop(key, None)
        if not http:
            cfg.pop("http_options")
    return yaml.safe_dump(cfg, sort_keys=False)


def to_apply_config(obj: dict[str, Any]) -> dict[str, Any]:
    """What to re-apply from a stored object (rollback): identity, labels/annotations and spec only."""
    meta = obj.get("metadata", {})
    keep = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta}
    return {
        "apiVersion": obj.get("apiVersion", API_VERSION),
        "kind": obj.get("kind", KIND),
        "metadata": copy.deepcopy(keep),
        "spec": copy.deepcopy(obj["spec"]),
    }


def capacity_needed(profile: str, workers: int, upgrade_strategy: str = "NewCluster") -> dict[str, float]:
    """Peak totals (cpu cores, memory GiB, accelerators) the node groups must fit during an upgrade.

    ``NewCluster`` (blue/green) runs the old and the new cluster side by side: twice head + workers.
    ``NewClusterWithIncrementalUpgrade`` adds a head plus ``maxSurgePercent`` of the workers at a time.
    ``None`` (in-place Serve config update) needs only the running cluster. Keys are Kubernetes resource
    names (``cpu``, ``memory`` in GiB, ``nvidia.com/gpu``, ``aws.amazon.com/neuroncore``), as in node allocatable.
    """
    node_profile = get_profile(profile)
    if upgrade_strategy not in UPGRADE_STRATEGIES:
        raise InvalidRayServiceError(
            f"Unknown upgrade_strategy {upgrade_strategy!r}; choose one of {list(UPGRADE_STRATEGIES)}."
        )
    one = _totals([(node_profile.head, 1)] + [(g.pod, workers) for g in node_profile.workers])
    if upgrade_strategy == "NewCluster":
        extra = one
    elif upgrade_strategy == "NewClusterWithIncrementalUpgrade":
        surge = math.ceil(workers * INCREMENTAL_UPGRADE_OPTIONS["maxSurgePercent"] / 100)
        extra = _totals([(node_profile.head, 1)] + [(g.pod, surge) for g in node_profile.workers])
    else:
        extra = {}
    return {key: one.get(key, 0.0) + extra.get(key, 0.0) for key in one}


# -- helpers ---------------------------------------------------------------------------------------


def _totals(pods: list[tuple[PodProfile, int]]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for pod, count in pods:
        for resource in pod.resources:
            totals[resource] = totals.get(resource, 0.0) + pod.quantity(resource) * count
    return totals


def _check_name(name: str) -> None:
    if len(name) > MAX_NAME_LENGTH or not _DNS1035.match(name):
        raise InvalidRayServiceError(
            f"RayService name {name!r} must be a DNS-1035 label (lowercase letters, digits, '-', starting "
            f"with a letter) of at most {MAX_NAME_LENGTH} characters."
        )


def _refuse_secret_name(key: str, *, where: str) -> None:
    if _SECRET_NAME.search(key):
        raise SecretInManifestError(
            f"{where} sets {key!r}, which looks like a credential; manifests must not hold secrets. "
            "Put it in a Kubernetes Secret (hf_token_secret= for the Hugging Face token)."
        )


def _env(
    profile: NodeProfile, env: dict[str, str], hf_home: str | None, hf_token_secret: str | None
) -> list[dict[str, Any]]:
    merged = {**profile.env, **env}
    for key in merged:
        _refuse_secret_name(key, where="env")
    if hf_home:
        merged["HF_HOME"] = hf_home
    items: list[dict[str, Any]] = [{"name": k, "value": str(v)} for k, v in sorted(merged.items())]
    if hf_token_secret:
        items.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": hf_token_secret, "key": HF_TOKEN_SECRET_KEY}},
            }
        )
    return items


_Volumes = tuple[list[dict[str, Any]], list[dict[str, Any]]]  # (pod volumes, container volumeMounts)


class _PodExtras(NamedTuple):
    """What every Ray pod of one RayService shares besides the profile: model volume, service account."""

    volumes_and_mounts: _Volumes
    service_account: str | None


def _model_volume(hf_home: str | None, claim: str | None) -> _Volumes:
    if not claim:
        return [], []
    volumes = [{"name": "models", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}]
    mounts = [{"name": "models", "mountPath": hf_home, "readOnly": True}]
    return volumes, mounts


_INIT_RESOURCES = {"cpu": "100m", "memory": "64Mi"}  # requests == limits, as every container of the pod (Guaranteed)


def _node_caches(pod: PodProfile, image: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's node-disk folders: ``hostPath`` volumes, their mounts, and the init container that gives each
    to the image's user (kubelet creates a missing one root-owned; only CHOWN is kept of root's capabilities)."""
    volumes = [
        {"name": c.name, "hostPath": {"path": c.node_path, "type": "DirectoryOrCreate"}} for c in pod.node_caches
    ]
    mounts = [{"name": c.name, "mountPath": c.mount_path} for c in pod.node_caches]
    if not pod.node_caches:
        return volumes, mounts, []
    init = {
        "name": "own-node-caches",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", " && ".join(f"chown {c.owner} {c.mount_path}" for c in pod.node_caches)],
        "securityContext": {
            "runAsUser": 0,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]},
        },
        "resources": {"requests": dict(_INIT_RESOURCES), "limits": dict(_INIT_RESOURCES)},
        "volumeMounts": copy.deepcopy(mounts),
    }
    return volumes, mounts, [init]


def _pod_template(
    pod: PodProfile,
    image: str,
    container_name: str,
    env: list[dict[str, Any]],
    extras: _PodExtras,
    *,
    head: bool,
    nodegroup: str = "",
) -> dict[str, Any]:
    """A Ray pod's template; a worker's (``nodegroup``: its profile's managed node group) selects that group's nodes
    (``NODEGROUP_LABEL``), so only the group raylift sizes can run it."""
    volumes, mounts = extras.volumes_and_mounts
    cache_volumes, cache_mounts, init_containers = _node_caches(pod, image)
    volumes, mounts = volumes + cache_volumes, mounts + cache_mounts
    container: dict[str, Any] = {
        "name": container_name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "env": copy.deepcopy(env),
        "resources": {"requests": dict(pod.resources), "limits": dict(pod.resources)},
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}},
    }
    if head:
        container["ports"] = [
            {"containerPort": 6379, "name": "gcs"},
            {"containerPort": 8265, "name": "dashboard"},
            {"containerPort": 10001, "name": "client"},
            {"containerPort": _SERVE_PORT, "name": "serve"},
        ]
    if mounts:
        container["volumeMounts"] = copy.deepcopy(mounts)
    spec: dict[str, Any] = {"containers": [container]}
    if init_containers:
        spec["initContainers"] = init_containers
    if extras.service_account:
        spec["serviceAccountName"] = extras.service_account
    selector = {**pod.node_selector, **({NODEGROUP_LABEL: nodegroup} if nodegroup else {})}
    if selector:
        spec["nodeSelector"] = selector
    if pod.tolerations:
        spec["tolerations"] = [dict(t) for t in pod.tolerations]
    if pod.instance_types:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "node.kubernetes.io/instance-type",
                                    "operator": "In",
                                    "values": list(pod.instance_types),
                                }
                            ]
                        }
                    ]
                }
            }
        }
    if pod.scheduler_name:
        spec["schedulerName"] = pod.scheduler_name
    if volumes:
        spec["volumes"] = copy.deepcopy(volumes)
    return {"spec": spec}
