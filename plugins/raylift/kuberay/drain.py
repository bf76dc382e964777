"""Scale-in of a RayService's workers on EKS: which pods and instances go, the drain Job, the RayCluster patch.

Pure (no client). Why each piece is shaped so:

- raylift reaches the cluster through the Kubernetes API only (the dashboard and GCS are cluster-internal), so
  Ray's drain runs in the cluster, as a ``batch/v1`` Job with the RayCluster's own Ray image: it finds the Ray
  nodes of the chosen pods by their pod IP (Ray's state API, ``ray.util.state.list_nodes``, on the head service),
  asks Ray to drain each (``ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION`` against the GCS: Ray always
  accepts it, stops scheduling there and lets Serve move the replicas before the deadline) and exits 0 once Ray
  lists them all DEAD. The Job's ``activeDeadlineSeconds`` is the drain's deadline: a drain that does not finish
  fails the Job, and the scale step with it.
- KubeRay itself never drains: its RayCluster controller deletes the pods named in a worker group's
  ``scaleStrategy.workersToDelete`` as they are (``raycluster_controller.go``, ``reconcilePods``: "Always remove
  the specified WorkersToDelete"), which is why Ray's autoscaler drains before it writes that list, and so does
  raylift. The list and the lowered ``replicas`` go on the *RayCluster*: the RayService controller leaves a
  running cluster alone when only ``replicas``/``workersToDelete`` differ ("Case 1 ... do nothing",
  ``rayservice_controller.go``), so a RayService edit would never reach it. The patch is a JSON Patch with
  ``test`` ops on each group's name and replicas: a concurrent change (Ray's autoscaler) is a 422, never
  overwritten.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from raylift.errors import ClusterError

RAY_CLUSTER_LABEL = "ray.io/cluster"
NODE_TYPE_LABEL = "ray.io/node-type"
GROUP_LABEL = "ray.io/group"
DRAIN_REASON = "DRAIN_NODE_REASON_PREEMPTION"  # ray.core.generated.autoscaler_pb2.DrainNodeReason
DRAIN_APP_LABEL = "raylift-ray-drain"
CONTAINER = "drain"
_NAME_BAD = re.compile(r"[^a-z0-9-]+")

# Runs in the Job, in the Ray image (only Ray and the standard library). argv[1]: JSON with dashboard, gcs, ips,
# reason, deadline_s, poll_s.
DRAIN_SCRIPT = r'''
import json, subprocess, sys, time
from ray.util.state import list_nodes

args = json.loads(sys.argv[1])

def nodes():
    return list_nodes(address=args["dashboard"], limit=10000, raise_on_missing_output=False)

targets = {n.node_id: n.node_ip for n in nodes()
           if n.node_ip in args["ips"] and n.state == "ALIVE" and not n.is_head_node}
missing = sorted(set(args["ips"]) - set(targets.values()))
print("draining Ray node(s) %s; no ALIVE Ray node at %s" % (targets, missing), flush=True)
for node_id in targets:
    subprocess.run(["ray", "drain-node", "--address", args["gcs"], "--node-id", node_id, "--reason", args["reason"],
                    "--reason-message", args["message"], "--deadline-remaining-seconds", str(args["deadline_s"])],
                   check=True)
while True:
    alive = sorted(n.node_id for n in nodes() if n.node_id in targets and n.state != "DEAD")
    if not alive:
        print("all drained", flush=True)
        break
    print("still draining %s" % alive, flush=True)
    time.sleep(args["poll_s"])
'''


@dataclass(frozen=True)
class RayPod:
    """A Ray pod of the cluster as Kubernetes lists it."""

    name: str
    group: str  # worker group ("" for the head)
    is_head: bool
    pod_ip: str
    host_ip: str  # the node's InternalIP: its EC2 instance's primary private IP ("" while unscheduled)


def ray_pods(items: Iterable[Mapping[str, Any]]) -> list[RayPod]:
    """``RayPod``s of a pod list (KubeRay's labels), pods being deleted left out."""
    out = []
    for pod in items:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        labels = meta.get("labels") or {}
        out.append(RayPod(str(meta.get("name")), str(labels.get(GROUP_LABEL) or ""),
                          labels.get(NODE_TYPE_LABEL) == "head", str(status.get("podIP") or ""),
                          str(status.get("hostIP") or "")))
    return sorted(out, key=lambda p: p.name)


@dataclass(frozen=True)
class WorkerRemoval:
    """What a scale-in removes: ``instances`` (EC2 ids) and ``pods`` (name -> instance id, "" when unscheduled)."""

    instances: list[str]
    pods: dict[str, str]
    keep: list[str] = field(default_factory=list)


def plan_removal(pods: list[RayPod], instances: Mapping[str, str], *, workers: int,
                 nodes: int) -> WorkerRemoval | None:
    """Pick the instances (``instance id -> private IP``) and worker pods a scale to ``workers`` pods on ``nodes``
    instances removes; None when it removes neither.

    Instances: those with no Ray pod first, then the fewest worker pods, then by id (a stable choice: Kubernetes
    does not know what Ray runs in a pod); never the one the head runs on. Pods: every worker pod on a removed
    instance, then, while more than ``workers`` would stay, unscheduled ones and then the rest by name."""
    by_ip = {ip: instance for instance, ip in instances.items() if ip}
    on: dict[str, list[RayPod]] = {instance: [] for instance in instances}
    heads = set()
    for pod in pods:
        instance = by_ip.get(pod.host_ip)
        if instance is None:
            continue
        if pod.is_head:
            heads.add(instance)
        else:
            on[instance].append(pod)
    count = max(0, len(instances) - nodes)
    order = sorted((i for i in instances if i not in heads), key=lambda i: (len(on[i]), i))
    if count > len(order):
        raise ClusterError(f"The scale-in removes {count} instance(s), but only {len(order)} can go without the Ray "
                           f"head's ({sorted(heads)}). Nothing was changed.")
    chosen = order[:count]
    removed = {pod.name: instance for instance in chosen for pod in on[instance]}
    workers_now = [p for p in pods if not p.is_head]
    rest = sorted((p for p in workers_now if p.name not in removed),
                  key=lambda p: (by_ip.get(p.host_ip) is not None, p.name))
    while len(workers_now) - len(removed) > workers and rest:
        extra = rest.pop(0)
        removed[extra.name] = by_ip.get(extra.host_ip, "")
    if not chosen and not removed:
        return None
    return WorkerRemoval(chosen, removed, sorted(set(instances) - set(chosen)))


def workers_to_delete_patch(cluster: Mapping[str, Any], pods: Iterable[RayPod]) -> list[dict[str, Any]]:
    """The JSON Patch that has KubeRay delete exactly ``pods`` (``scaleStrategy.workersToDelete``) and not recreate
    them (``replicas`` lowered by as many, ``minReplicas`` no higher), with ``test`` ops so a group changed since
    (Ray's autoscaler) fails the patch instead of being overwritten."""
    by_group: dict[str, list[str]] = {}
    for pod in pods:
        by_group.setdefault(pod.group, []).append(pod.name)
    ops: list[dict[str, Any]] = []
    groups = (cluster.get("spec") or {}).get("workerGroupSpecs") or []
    for index, group in enumerate(groups):
        names = sorted(by_group.pop(group.get("groupName"), []))
        if not names:
            continue
        path = f"/spec/workerGroupSpecs/{index}"
        replicas = int(group.get("replicas") or 0)
        left = max(0, replicas - len(names))
        ops += [{"op": "test", "path": f"{path}/groupName", "value": group["groupName"]},
                {"op": "test", "path": f"{path}/replicas", "value": replicas},
                {"op": "replace", "path": f"{path}/replicas", "value": left},
                {"op": "add", "path": f"{path}/scaleStrategy", "value": {"workersToDelete": names}}]
        if int(group.get("minReplicas") or 0) > left:
            ops.append({"op": "replace", "path": f"{path}/minReplicas", "value": left})
    if by_group:
        raise ClusterError(f"RayCluster {(cluster.get('metadata') or {}).get('name')} has no worker group(s) "
                           f"{sorted(by_group)} for pods {sorted(n for v in by_group.values() for n in v)}; nothing "
                           "was changed. Run the scale step again.")
    return ops


def head_service(cluster: Mapping[str, Any]) -> str:
    """The RayCluster's head Service (``status.head.serviceName``; KubeRay's ``<cluster>-head-svc`` before it)."""
    name = str((cluster.get("metadata") or {}).get("name"))
    return str(((cluster.get("status") or {}).get("head") or {}).get("serviceName") or f"{name}-head-svc")


def worker_image(cluster: Mapping[str, Any]) -> str:
    """The Ray image the cluster's workers run (the drain speaks the same Ray version)."""
    for group in (cluster.get("spec") or {}).get("workerGroupSpecs") or []:
        for container in ((group.get("template") or {}).get("spec") or {}).get("containers") or []:
            if container.get("image"):
                return str(container["image"])
    head = ((cluster.get("spec") or {}).get("headGroupSpec") or {}).get("template") or {}
    return str(((head.get("spec") or {}).get("containers") or [{}])[0].get("image") or "")


def drain_job_name(cluster: str, pods: Iterable[str]) -> str:
    """A DNS-1123 label, the same for the same drain (a retried step finds its Job: 409, then waits on it)."""
    import hashlib

    digest = hashlib.sha256("/".join([cluster, *sorted(pods)]).encode()).hexdigest()[:10]
    return (_NAME_BAD.sub("-", f"raylift-drain-{cluster}".lower()).strip("-")[:50].rstrip("-") + f"-{digest}")


def render_drain_job(*, name: str, namespace: str, image: str, head_service: str, pod_ips: list[str],
                     message: str, deadline_s: int, ray_auth_secret: str | None = None,
                     poll_s: int = 5) -> dict[str, Any]:
    """The ``batch/v1`` Job that drains the Ray nodes at ``pod_ips`` and ends once Ray lists them DEAD (see the
    module docstring). With ``ray_auth_secret`` the Job sends the cluster's token (``RAY_AUTH_MODE=token``,
    ``RAY_AUTH_TOKEN`` from the Secret's ``auth_token``), as KubeRay's own Ray containers do."""
    args = {"dashboard": f"http://{head_service}.{namespace}.svc:8265", "gcs": f"{head_service}.{namespace}.svc:6379",
            "ips": sorted(pod_ips), "reason": DRAIN_REASON, "message": message, "deadline_s": int(deadline_s),
            "poll_s": poll_s}
    env: list[dict[str, Any]] = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
    if ray_auth_secret:
        env += [{"name": "RAY_AUTH_MODE", "value": "token"},
                {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": ray_auth_secret, "key": "auth_token"}}}]
    labels = {"app.kubernetes.io/name": DRAIN_APP_LABEL, "app.kubernetes.io/managed-by": "raylift"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,  # a refused drain is an answer, not a flake: the step fails with the pod's log
            "activeDeadlineSeconds": int(deadline_s),
            "ttlSecondsAfterFinished": 86400,  # kept a day for `kubectl logs job/<name>`
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": CONTAINER,
                        "image": image,
                        "command": ["python", "-c", DRAIN_SCRIPT, json.dumps(args, sort_keys=True)],
                        "env": env,
                        "securityContext": {"allowPrivilegeEscalation": False},
                    }],
                },
            },
        },
    }
