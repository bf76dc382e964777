"""KubeRay v1.7.0's RayService controller, reduced to what decides an upgrade, played against the Kubernetes API
stand-in (``tests.fixtures.kube_rayclusters``): each ``reconcile()`` reads the stored RayService as the operator does
and writes the status it would write, creates and deletes the RayClusters (and their Ray pods, placed on the worker
node group's instances) it would.

Ported from ``ray-operator/controllers/ray/rayservice_controller.go`` at v1.7.0 (commit feeaf72, the release the
CRDs in ../shared/reference/kuberay are from), function by function: ``Reconcile`` (the order: clusters, rollback
state, ``reconcileServe`` of the pending then the active cluster, the Gateway's HTTPRoute, the Services, then
``calculateStatus``), ``reconcileRollbackState``, ``reconcileServeTargetCapacity`` with
``checkIfNeedTargetCapacityUpdate``, ``calculateTrafficRoutedPercent``, ``reconcilePromotionAndServingStatus``,
``shouldCompleteIncrementalRollback``, ``shouldPrepareNewCluster``, ``calculateConditions``, ``createGateway`` /
``reconcileGateway`` and ``createHTTPRoute`` / ``reconcileHTTPRoute`` (the Gateway ``<rayservice>-gateway`` with one
HTTP listener on port 80, the HTTPRoute ``<rayservice>-httproute`` on ``/`` to both clusters' ``<cluster>-serve-svc``
with their weights), written to the Kubernetes API stand-in. Capacity moves only where ``checkIfNeedTargetCapacityUpdate``
lets it: both clusters named, ``utils.IsGatewayReady`` (``ray-operator/controllers/ray/utils/util.go``: the Gateway's
``Accepted`` and ``Programmed`` conditions True) and ``utils.IsHTTPRouteReady`` (the route's parent entry for that
Gateway ``Accepted`` and ``ResolvedRefs`` True); whoever writes those statuses (``tests.kuberay.gateway_api``'s
``EnvoyGateway``, reconciled after each KubeRay reconcile) decides. The cluster hash is
``utils.GenerateHashWithoutReplicasAndWorkersToDelete`` of ``rayClusterSpecForHashing`` (``_hash`` below), never
raylift's. Left out: Serve itself (a cluster's apps are RUNNING once ``ready``; ``mark_ready``),
the interval between traffic steps (every reconcile counts as one interval: the most a hold can be pushed), the
deletion delay (an unreferenced cluster goes at the next reconcile) and appended worker groups.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from tests.fixtures.kube_rayclusters import ray_pod
from tests.kuberay.gateway_api import GATEWAY_API, EnvoyGateway, KubeGatewayStandIn

INCREMENTAL = "NewClusterWithIncrementalUpgrade"
HEAD_HOSTS = "10.0.200."  # the ray-head NodePool's nodes: not in the worker node group


@dataclass
class Cluster:
    name: str
    hash: str
    ready: bool
    target_capacity: int | None = None


@dataclass
class KubeRayModel:
    kube: KubeGatewayStandIn
    namespace: str
    name: str
    worker_hosts: Callable[[], list[str]]  # the worker node group's instance IPs, as EC2 has them now
    ready_on_create: bool = True
    # seconds each pod a new cluster gets spends waiting for a node, in init containers, pulling its image and
    # starting, and until Ray is ready (``tests.fixtures.kube_rayclusters.ray_pod``'s timestamps); None: no stamps
    pod_phases: tuple[float, float, float, float] | None = None
    clusters: dict[str, Cluster] = field(default_factory=dict)
    serve_service: str | None = None  # the cluster <name>-serve-svc (and the head Service) select
    route: tuple[int, int] | None = None  # the HTTPRoute's (active, pending) weights
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    envoy: EnvoyGateway | None = None  # the Gateway API controller; None: none runs, no Gateway is ever ready
    capacity_blocked: str = ""  # why checkIfNeedTargetCapacityUpdate last said no (its message), for the tests

    # -- what the test reads -----------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        obj = self.kube.stored(self.namespace, self.name) or {}
        return dict(obj.get("status") or {})

    def active(self) -> str:
        return str((self.status().get("activeServiceStatus") or {}).get("rayClusterName") or "")

    def pending(self) -> str:
        return str((self.status().get("pendingServiceStatus") or {}).get("rayClusterName") or "")

    def mark_ready(self, cluster: str, ready: bool = True) -> None:
        self.clusters[cluster].ready = ready

    def reconcile_times(self, times: int) -> None:
        for _ in range(times):
            self.reconcile()

    # -- one reconcile -----------------------------------------------------------------------------
    def reconcile(self) -> None:  # noqa: C901 - the controller's own sequence, kept in one place
        obj = self.kube.stored(self.namespace, self.name)
        assert obj is not None, "no RayService to reconcile"
        spec = obj["spec"]
        status = copy.deepcopy(obj.get("status") or {})
        status.setdefault("activeServiceStatus", {})
        status.setdefault("pendingServiceStatus", {})
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        strategy = spec.get("upgradeStrategy") or {}
        incremental = strategy.get("type") == INCREMENTAL  # RayServiceIncrementalUpgrade: on in the 1.7.0 chart
        options = strategy.get("clusterUpgradeOptions") or {}
        goal = _hash(spec)

        def is_true(kind: str) -> bool:
            return (conditions.get(kind) or {}).get("status") == "True"

        def set_condition(kind: str, value: bool) -> None:
            conditions[kind] = {"type": kind, "status": "True" if value else "False", "reason": "Model",
                                "message": "", "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ")}

        def names() -> tuple[str, str]:
            return (str(status["activeServiceStatus"].get("rayClusterName") or ""),
                    str(status["pendingServiceStatus"].get("rayClusterName") or ""))

        # cleanUpRayClusterInstance: clusters neither active nor pending go (after the deletion delay)
        for cluster in [c for c in self.clusters if c not in names()]:
            self._delete(cluster)
        # reconcileRayCluster: a named pending cluster that does not exist yet is created from the spec
        active_name, pending_name = names()
        if pending_name and pending_name not in self.clusters:
            self._create(pending_name, spec, goal)
        active, pending = self.clusters.get(active_name), self.clusters.get(pending_name)
        # reconcileRollbackState
        if incremental and is_true("UpgradeInProgress") and active and pending:
            if goal == active.hash:
                set_condition("RollbackInProgress", True)
            elif goal == pending.hash:
                conditions.pop("RollbackInProgress", None)
            else:
                set_condition("RollbackInProgress", True)
        rolling_back = incremental and is_true("RollbackInProgress")
        upgrading = incremental and is_true("UpgradeInProgress")
        # reconcileServe: the pending cluster, then the active one (alone, or beside it during an incremental upgrade)
        pending_ready = active_ready = False
        if pending:
            pending_ready = pending.ready
            if upgrading and self._need_target_capacity_update(status, is_true):
                self._target_capacity(status, options, pending.name, rolling_back)
            status["pendingServiceStatus"]["applicationStatuses"] = self._apps(spec, pending)
        if active and not pending and not self._should_prepare(spec, goal, active, None, False, is_true):
            active_ready = active.ready
            status["activeServiceStatus"]["applicationStatuses"] = self._apps(spec, active)
        elif active and pending and incremental:
            active_ready = active.ready
            if upgrading and self._need_target_capacity_update(status, is_true):
                self._target_capacity(status, options, active.name, rolling_back)
        # reconcileGateway, reconcileHTTPRoute (createHTTPRoute: only once the active cluster exists)
        if incremental:
            self._reconcile_gateway(options)
            self.route = self._weights(status, options, pending_ready, rolling_back)
            if active:
                self._reconcile_httproute(active, pending, self.route)
        # reconcileServicesToReadyCluster
        if pending_ready or active_ready:
            target = active
            if pending_ready and not upgrading:
                target = pending
            assert target is not None
            self.serve_service = target.name
        # calculateStatus
        serving_pending = False
        if self.serve_service:
            if incremental and self.route:
                status["activeServiceStatus"]["trafficRoutedPercent"] = self.route[0]
                if pending:
                    status["pendingServiceStatus"]["trafficRoutedPercent"] = self.route[1]
            active_name, pending_name = names()
            promote = False
            if incremental:
                if is_true("UpgradeInProgress"):
                    complete = (pending is not None and status["activeServiceStatus"].get("targetCapacity") == 0
                                and status["pendingServiceStatus"].get("trafficRoutedPercent") == 100)
                    promote = not is_true("RollbackInProgress") and complete
                elif not active_name and pending_name:
                    promote = True
            elif active_name != self.serve_service:
                promote = True
            if promote:
                status["activeServiceStatus"] = status["pendingServiceStatus"]
                status["pendingServiceStatus"] = {}
            serving_pending = self.serve_service == pending_name
        if is_true("RollbackInProgress"):
            a, p = status["activeServiceStatus"], status["pendingServiceStatus"]
            if (a.get("targetCapacity") == 100 and a.get("trafficRoutedPercent") == 100
                    and (not pending or (p.get("targetCapacity") == 0 and p.get("trafficRoutedPercent") == 0))):
                status["pendingServiceStatus"] = {}
                pending = None
                conditions.pop("RollbackInProgress", None)
                set_condition("UpgradeInProgress", False)
        active = self.clusters.get(names()[0])
        if self._should_prepare(spec, goal, active, pending, serving_pending, is_true):
            new = {"rayClusterName": f"{self.name}-{len(self.created) + 1:05d}"}
            if incremental:
                new["targetCapacity"] = 100 if not names()[0] else 0
            status["pendingServiceStatus"] = new
        # calculateConditions
        active_name, pending_name = names()
        set_condition("Ready", self.serve_service is not None)
        if active_name:
            set_condition("UpgradeInProgress", bool(pending_name))
        status["conditions"] = list(conditions.values())
        status["observedGeneration"] = obj["metadata"]["generation"]
        status["serviceStatus"] = "Running" if self.serve_service else ""
        self.kube.write_status(self.namespace, self.name, status)
        if self.envoy is not None:  # the Gateway API controller acts between KubeRay's reconciles
            self.envoy.reconcile()

    # -- the controller's helpers --------------------------------------------------------------------
    def _should_prepare(self, spec: dict[str, Any], goal: str, active: Cluster | None, pending: Cluster | None,
                        serving_pending: bool, is_true: Callable[[str], bool]) -> bool:
        """``shouldPrepareNewCluster`` (and ``isZeroDowntimeUpgradeEnabled``)."""
        if serving_pending or is_true("RollbackInProgress"):
            return False
        if active is None and pending is None:
            return True
        cluster = pending or active
        assert cluster is not None
        if cluster.hash == goal:
            return False
        kind = (spec.get("upgradeStrategy") or {}).get("type") or "NewCluster"
        return kind in ("NewCluster", INCREMENTAL)

    def _need_target_capacity_update(self, status: dict[str, Any], is_true: Callable[[str], bool]) -> bool:
        """``checkIfNeedTargetCapacityUpdate`` (rayservice_controller.go, v1.7.0): the Gateway and the HTTPRoute
        ready (``utils.IsGatewayReady``, ``utils.IsHTTPRouteReady``), then whether the capacities have a step left."""
        a, p = status["activeServiceStatus"], status["pendingServiceStatus"]
        why = ""
        gateway = self.kube.gateways.get((self.namespace, f"{self.name}-gateway"))
        route = self.kube.httproutes.get((self.namespace, f"{self.name}-httproute"))
        if not a.get("rayClusterName") or not p.get("rayClusterName"):
            why = "Both active and pending RayCluster instances are required for NewClusterWithIncrementalUpgrade."
        elif gateway is None:
            why = "Failed to retrieve Gateway for RayService"
        elif not is_gateway_ready(gateway):
            why = "Gateway for RayService NewClusterWithIncrementalUpgrade is not ready."
        elif route is None:
            why = "Failed to retrieve HTTPRoute for RayService"
        elif not is_httproute_ready(gateway, route):
            why = "HTTPRoute for RayService NewClusterWithIncrementalUpgrade is not ready."
        elif None not in (a.get("targetCapacity"), a.get("trafficRoutedPercent"), p.get("targetCapacity"),
                          p.get("trafficRoutedPercent")):
            a_cap, p_cap = int(a["targetCapacity"]), int(p["targetCapacity"])
            if is_true("RollbackInProgress") and (a_cap, p_cap) == (100, 0):
                why = "Rollback complete: all traffic has been restored to the active cluster."
            elif not is_true("RollbackInProgress") and (a_cap, p_cap) == (0, 100):
                why = "All traffic has migrated to the upgraded cluster and NewClusterWithIncrementalUpgrade is complete."
        self.capacity_blocked = why
        return not why

    def _reconcile_gateway(self, options: dict[str, Any]) -> None:
        """``createGateway`` / ``reconcileGateway``: ``<rayservice>-gateway``, one HTTP listener "http" on 80
        (``utils.GatewayListenerPortName``, ``utils.DefaultGatewayListenerPort``); status is its controller's."""
        key = (self.namespace, f"{self.name}-gateway")
        spec = {"gatewayClassName": options["gatewayClassName"],
                "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}
        existing = self.kube.gateways.get(key)
        if existing is None:
            self.kube.gateways[key] = {"apiVersion": GATEWAY_API, "kind": "Gateway", "metadata": {
                "name": key[1], "namespace": key[0], "generation": 1}, "spec": spec, "status": {}}
        elif existing["spec"] != spec:
            existing["spec"] = spec
            existing["metadata"]["generation"] += 1

    def _reconcile_httproute(self, active: Cluster, pending: Cluster | None, weights: tuple[int, int]) -> None:
        """``createHTTPRoute`` / ``reconcileHTTPRoute``: ``<rayservice>-httproute``, PathPrefix "/" to the active
        (and pending) cluster's ``<cluster>-serve-svc`` on the serve port, with their weights."""
        key = (self.namespace, f"{self.name}-httproute")
        backends = [{"name": f"{active.name}-serve-svc", "namespace": self.namespace, "port": 8000,
                     "weight": weights[0]}]
        if pending is not None:
            backends.append({"name": f"{pending.name}-serve-svc", "namespace": self.namespace, "port": 8000,
                             "weight": weights[1]})
        spec = {"parentRefs": [{"name": f"{self.name}-gateway", "namespace": self.namespace}],
                "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": backends}]}
        existing = self.kube.httproutes.get(key)
        if existing is None:
            self.kube.httproutes[key] = {"apiVersion": GATEWAY_API, "kind": "HTTPRoute", "metadata": {
                "name": key[1], "namespace": key[0], "generation": 1}, "spec": spec, "status": {}}
        elif existing["spec"] != spec:
            existing["spec"] = spec
            existing["metadata"]["generation"] += 1

    def serve_services(self) -> set[str]:
        """The per-cluster Serve Services that exist (``reconcilePerClusterServeService``: one per cluster)."""
        return {f"{c}-serve-svc" for c in self.clusters}

    def _target_capacity(self, status: dict[str, Any], options: dict[str, Any], cluster: str, rolling_back: bool) -> None:
        """``checkIfNeedTargetCapacityUpdate`` then ``reconcileServeTargetCapacity`` for ``cluster``."""
        a, p = status["activeServiceStatus"], status["pendingServiceStatus"]
        if not a.get("rayClusterName") or not p.get("rayClusterName"):
            return
        known = None not in (a.get("targetCapacity"), a.get("trafficRoutedPercent"), p.get("targetCapacity"),
                             p.get("trafficRoutedPercent"))
        if known:
            done = (a["targetCapacity"], p["targetCapacity"]) == ((100, 0) if rolling_back else (0, 100))
            if done:
                return
        a.setdefault("targetCapacity", 100)
        p.setdefault("targetCapacity", 0)
        a_cap, p_cap, p_traffic = a["targetCapacity"], p["targetCapacity"], p.get("trafficRoutedPercent") or 0
        surge = int(options.get("maxSurgePercent", 100))
        goal: int | None = None
        if rolling_back:
            if a_cap != (a.get("trafficRoutedPercent") or 0):
                return
            if a_cap + p_cap > 100 and cluster == p["rayClusterName"]:
                goal, side = max(0, p_cap - surge), p
            elif a_cap + p_cap <= 100 and cluster == a["rayClusterName"]:
                goal, side = min(100, a_cap + surge), a
        elif p_cap == p_traffic:
            if cluster == a["rayClusterName"] and a_cap + p_cap > 100:
                goal, side = max(0, a_cap - surge), a
            elif cluster == p["rayClusterName"] and a_cap + p_cap <= 100:
                goal, side = min(100, p_cap + surge), p
        if goal is not None:
            side["targetCapacity"] = goal
            self.clusters[cluster].target_capacity = goal  # applyServeTargetCapacity: Serve's target_capacity

    def _weights(self, status: dict[str, Any], options: dict[str, Any], pending_ready: bool,
                 rolling_back: bool) -> tuple[int, int]:
        """``calculateTrafficRoutedPercent``."""
        a, p = status["activeServiceStatus"], status["pendingServiceStatus"]
        a_weight, p_weight = a.get("trafficRoutedPercent", 100), p.get("trafficRoutedPercent", 0)
        p_cap, a_cap = p.get("targetCapacity", 0), a.get("targetCapacity", 100)
        if (p_weight == p_cap and not rolling_back) or (rolling_back and a_weight == a_cap):
            return a_weight, p_weight
        step = int(options["stepSizePercent"])
        if rolling_back:
            a_weight = min(100, a_weight + step, a_cap)
            p_weight = 100 - a_weight
        elif pending_ready:
            p_weight = min(100, p_weight + step, p_cap)
            a_weight = 100 - p_weight
        return a_weight, p_weight

    def _apps(self, spec: dict[str, Any], cluster: Cluster) -> dict[str, Any]:
        apps = [a["name"] for a in (yaml.safe_load(spec.get("serveConfigV2") or "") or {}).get("applications", [])]
        return {app: {"status": "RUNNING" if cluster.ready else "DEPLOYING"} for app in apps}

    # -- the RayClusters and their pods ----------------------------------------------------------------
    def _create(self, name: str, spec: dict[str, Any], goal: str) -> None:
        config = copy.deepcopy(spec["rayClusterConfig"])
        self.kube.rayclusters[(self.namespace, name)] = {
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": self.namespace, "resourceVersion": "1"},
            "spec": config, "status": {"head": {"serviceName": f"{name}-head-svc"}}}
        used = {p["status"]["hostIP"] for pods in self.kube.ray_pods.values() for p in pods}
        free = [ip for ip in self.worker_hosts() if ip not in used]
        times = None
        if self.pod_phases is not None:  # created now; each phase after the one before
            times = (now := time.time(),) + tuple(now + sum(self.pod_phases[:k + 1]) for k in range(4))
        image = config["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
        pods = [ray_pod(f"{name}-head", name, pod_ip=f"{HEAD_HOSTS}{len(self.created) + 10}",
                        host_ip=f"{HEAD_HOSTS}{len(self.created) + 10}", times=times, image=image)]
        for group in config["workerGroupSpecs"]:
            for i in range(int(group["replicas"])):
                host = free.pop(0) if free else ""
                pods.append(ray_pod(f"{name}-{group['groupName']}-{i}", name, group=group["groupName"],
                                    pod_ip=f"10.1.{len(self.created)}.{i + 1}", host_ip=host, times=times,
                                    image=group["template"]["spec"]["containers"][0]["image"]))
        self.kube.ray_pods[(self.namespace, name)] = pods
        self.clusters[name] = Cluster(name, goal, self.ready_on_create)
        self.created.append(name)

    def _delete(self, name: str) -> None:
        self.clusters.pop(name)
        self.kube.rayclusters.pop((self.namespace, name), None)
        self.kube.ray_pods.pop((self.namespace, name), None)
        self.deleted.append(name)


def is_gateway_ready(gateway: dict[str, Any]) -> bool:
    """``utils.IsGatewayReady`` (ray-operator/controllers/ray/utils/util.go, v1.7.0): Accepted and Programmed True."""
    conditions = {c["type"]: c["status"] for c in (gateway.get("status") or {}).get("conditions") or []}
    return conditions.get("Accepted") == "True" and conditions.get("Programmed") == "True"


def is_httproute_ready(gateway: dict[str, Any], route: dict[str, Any]) -> bool:
    """``utils.IsHTTPRouteReady`` (same file): the route's parent entry for this Gateway (by name, and namespace
    when given) has Accepted and ResolvedRefs True."""
    for parent in (route.get("status") or {}).get("parents") or []:
        ref = parent.get("parentRef") or {}
        if ref.get("name") != gateway["metadata"]["name"]:
            continue
        if ref.get("namespace") is not None and ref["namespace"] != gateway["metadata"]["namespace"]:
            continue
        conditions = {c["type"]: c["status"] for c in parent.get("conditions") or []}
        if conditions.get("Accepted") == "True" and conditions.get("ResolvedRefs") == "True":
            return True
    return False


def _hash(spec: dict[str, Any]) -> str:
    """KubeRay v1.7.0's ``utils.GenerateHashWithoutReplicasAndWorkersToDelete`` (ray-operator/controllers/ray/utils/
    util.go) of ``rayClusterSpecForHashing(rayService)`` (rayservice_controller.go: ``spec.rayClusterConfig`` with
    ``suspend`` nil): the head's and each worker group's pod ``tolerations`` and ``schedulingGates`` nil, each worker
    group's ``replicas``, ``minReplicas``, ``maxReplicas`` and ``scaleStrategy.workersToDelete`` nil, the RayCluster
    spec's ``upgradeStrategy`` nil; then ``GenerateJsonHash``: SHA-1 of the JSON, base32 (hex alphabet).

    Go marshals the typed struct, so a nil pointer, slice or map with ``omitempty`` is left out and an empty
    ``scaleStrategy`` struct is ``{}``: the port drops None values and empty collections the same way (``_go_json``)
    and writes ``scaleStrategy`` as ``{}`` when present, so equal specs hash equal as in Go."""
    import base64
    import hashlib

    config = copy.deepcopy(spec.get("rayClusterConfig") or {})
    config.pop("suspend", None)  # rayClusterSpecForHashing
    head_pod = ((config.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}
    head_pod.pop("tolerations", None)
    head_pod.pop("schedulingGates", None)
    for group in config.get("workerGroupSpecs") or []:
        for key in ("replicas", "maxReplicas", "minReplicas"):
            group.pop(key, None)
        scale = dict(group.get("scaleStrategy") or {})
        scale.pop("workersToDelete", None)
        group["scaleStrategy"] = scale  # a struct, not a pointer: Go writes {} even when empty
        pod = (group.get("template") or {}).get("spec") or {}
        pod.pop("tolerations", None)
        pod.pop("schedulingGates", None)
    config.pop("upgradeStrategy", None)
    serial = json.dumps(_go_json(config), sort_keys=True, separators=(",", ":")).encode()
    return base64.b32hexencode(hashlib.sha1(serial).digest()).decode()  # noqa: S324 - KubeRay's own choice


def _go_json(value: Any, *, keep_empty: bool = False) -> Any:
    """A JSON value as Go's encoding/json writes the typed struct back: nil (None) and empty ``omitempty``
    collections left out; ``scaleStrategy`` kept as ``{}`` (see ``_hash``)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if v is None:
                continue
            v = _go_json(v, keep_empty=k == "scaleStrategy")
            if (isinstance(v, (dict, list)) and not v) and k != "scaleStrategy":
                continue
            out[k] = v
        return out
    if isinstance(value, list):
        return [_go_json(v) for v in value]
    return value
