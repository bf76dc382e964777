"""KubeRay v1.7.0's RayService controller, reduced to what decides an upgrade, played against the Kubernetes API
stand-in (``tests.fixtures.kube_rayclusters``): each ``reconcile()`` reads the stored RayService as the operator does
and writes the status it would write, creates and deletes the RayClusters (and their Ray pods, placed on the worker
node group's instances) it would.

Ported from ``ray-operator/controllers/ray/rayservice_controller.go`` at v1.7.0 (commit feeaf72, the release the
CRDs in ../shared/reference/kuberay are from), function by function: ``Reconcile`` (the order: clusters, rollback
state, ``reconcileServe`` of the pending then the active cluster, the Gateway's HTTPRoute, the Services, then
``calculateStatus``), ``reconcileRollbackState``, ``reconcileServeTargetCapacity`` with
``checkIfNeedTargetCapacityUpdate``, ``calculateTrafficRoutedPercent``, ``reconcilePromotionAndServingStatus``,
``shouldCompleteIncrementalRollback``, ``shouldPrepareNewCluster`` and ``calculateConditions``. Left out: the
Gateway's own readiness (taken as ready), Serve itself (a cluster's apps are RUNNING once ``ready``; ``mark_ready``),
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

from raylift.kuberay.upgrade import _hashed
from tests.fixtures.kube_rayclusters import KubeRayClustersStandIn, ray_pod

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
    kube: KubeRayClustersStandIn
    namespace: str
    name: str
    worker_hosts: Callable[[], list[str]]  # the worker node group's instance IPs, as EC2 has them now
    ready_on_create: bool = True
    clusters: dict[str, Cluster] = field(default_factory=dict)
    serve_service: str | None = None  # the cluster <name>-serve-svc (and the head Service) select
    route: tuple[int, int] | None = None  # the HTTPRoute's (active, pending) weights
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

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
            if upgrading:
                self._target_capacity(status, options, pending.name, rolling_back)
            status["pendingServiceStatus"]["applicationStatuses"] = self._apps(spec, pending)
        if active and not pending and not self._should_prepare(spec, goal, active, None, False, is_true):
            active_ready = active.ready
            status["activeServiceStatus"]["applicationStatuses"] = self._apps(spec, active)
        elif active and pending and incremental:
            active_ready = active.ready
            if upgrading:
                self._target_capacity(status, options, active.name, rolling_back)
        # reconcileHTTPRoute
        if incremental:
            self.route = self._weights(status, options, pending_ready, rolling_back)
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
        pods = [ray_pod(f"{name}-head", name, pod_ip=f"{HEAD_HOSTS}{len(self.created) + 10}",
                        host_ip=f"{HEAD_HOSTS}{len(self.created) + 10}")]
        for group in config["workerGroupSpecs"]:
            for i in range(int(group["replicas"])):
                host = free.pop(0) if free else ""
                pods.append(ray_pod(f"{name}-{group['groupName']}-{i}", name, group=group["groupName"],
                                    pod_ip=f"10.1.{len(self.created)}.{i + 1}", host_ip=host))
        self.kube.ray_pods[(self.namespace, name)] = pods
        self.clusters[name] = Cluster(name, goal, self.ready_on_create)
        self.created.append(name)

    def _delete(self, name: str) -> None:
        self.clusters.pop(name)
        self.kube.rayclusters.pop((self.namespace, name), None)
        self.kube.ray_pods.pop((self.namespace, name), None)
        self.deleted.append(name)


def _hash(spec: dict[str, Any]) -> str:
    """KubeRay's ``GenerateHashWithoutReplicasAndWorkersToDelete`` of ``rayClusterConfig`` (as raylift ports it)."""
    return json.dumps(_hashed(spec.get("rayClusterConfig")), sort_keys=True)
