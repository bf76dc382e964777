"""Will applying a RayService spec start a second Ray cluster? KubeRay's own rules, on the specs themselves.

KubeRay (``rayservice_controller.go``) hashes ``spec.rayClusterConfig`` with each worker group's
``replicas``, ``minReplicas``, ``maxReplicas`` and ``scaleStrategy.workersToDelete`` (and the RayCluster's own
``upgradeStrategy``) left out, and compares it with the hash of the cluster it runs:

- same hash: the cluster stays; a changed ``serveConfigV2`` is sent to that cluster's Serve (in place);
- the live worker groups unchanged and new ones appended at the end: the cluster is updated in place;
- anything else: under ``upgradeStrategy.type`` ``NewCluster`` (or ``NewClusterWithIncrementalUpgrade``) a new
  cluster starts beside the old one until it serves; under ``None`` KubeRay leaves the cluster as it is.

Only the last case needs capacity for two clusters, so that is the only one the EKS target sizes for.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

# Fields KubeRay leaves out of the hash: the autoscaler changes them, so they never replace a cluster.
MUTED_WORKER_GROUP_FIELDS = ("replicas", "minReplicas", "maxReplicas")


class ClusterChange(StrEnum):
    """What KubeRay does with the Ray cluster when a RayService spec is applied."""

    CREATE = "create"  # no RayService yet: its first cluster
    IN_PLACE = "in-place"  # only serveConfigV2 (or replicas) changed: the running cluster takes it
    ADD_GROUPS = "add-groups"  # worker groups appended: the running cluster grows in place
    NEW_CLUSTER = "new-cluster"  # rayClusterConfig changed: a new cluster, if the upgrade strategy allows


# Pod fields KubeRay (v1.7) also leaves out, in the head's and each worker group's pod template: external controllers
# (Kueue) inject them after creation (utils.GenerateHashWithoutReplicasAndWorkersToDelete).
MUTED_POD_FIELDS = ("tolerations", "schedulingGates")


def _hashed(cluster_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """``rayClusterConfig`` as KubeRay hashes it: without the fields the autoscaler owns, the pods' tolerations and
    scheduling gates, ``suspend`` (``rayClusterSpecForHashing``) and the RayCluster's ``upgradeStrategy``."""
    view = copy.deepcopy(dict(cluster_config or {}))
    view.pop("upgradeStrategy", None)
    view.pop("suspend", None)
    head_pod = ((view.get("headGroupSpec") or {}).get("template") or {}).get("spec")
    for pod in [head_pod, *[((g.get("template") or {}).get("spec")) for g in view.get("workerGroupSpecs") or []]]:
        if isinstance(pod, dict):
            for key in MUTED_POD_FIELDS:
                pod.pop(key, None)
    groups = view.get("workerGroupSpecs") or []
    for group in groups:
        for key in MUTED_WORKER_GROUP_FIELDS:
            group.pop(key, None)
        strategy = group.get("scaleStrategy")
        if isinstance(strategy, dict):
            strategy.pop("workersToDelete", None)
            if not strategy:
                group.pop("scaleStrategy")
    view["workerGroupSpecs"] = groups
    return view


def cluster_change(live_spec: Mapping[str, Any] | None, new_spec: Mapping[str, Any]) -> ClusterChange:
    """How KubeRay treats the cluster when ``new_spec`` replaces ``live_spec`` (both RayService ``spec``s, as
    the API server stores them: compare a dry run's answer with a GET, so defaulted fields match)."""
    if live_spec is None:
        return ClusterChange.CREATE
    old = _hashed(live_spec.get("rayClusterConfig"))
    new = _hashed(new_spec.get("rayClusterConfig"))
    if old == new:
        return ClusterChange.IN_PLACE
    old_groups, new_groups = old["workerGroupSpecs"], new["workerGroupSpecs"]
    if len(new_groups) > len(old_groups) and {**new, "workerGroupSpecs": new_groups[: len(old_groups)]} == old:
        return ClusterChange.ADD_GROUPS
    return ClusterChange.NEW_CLUSTER


def upgrade_strategy(spec: Mapping[str, Any]) -> str:
    """The spec's ``upgradeStrategy.type``; KubeRay's default (zero-downtime upgrades on) is ``NewCluster``."""
    return str((spec.get("upgradeStrategy") or {}).get("type") or "NewCluster")


def starts_new_cluster(live_spec: Mapping[str, Any] | None, new_spec: Mapping[str, Any]) -> bool:
    """True when applying ``new_spec`` runs a second Ray cluster beside the live one until it serves."""
    return upgrade_strategy(new_spec) != "None" and cluster_change(live_spec, new_spec) is ClusterChange.NEW_CLUSTER


# -- a held upgrade: the new cluster started beside the old one, no traffic to it until raylift promotes it ----------
#
# KubeRay (v1.7, ``rayservice_controller.go``) switches a ``NewCluster`` upgrade's Services to the pending cluster in
# the reconcile after its Serve apps are all RUNNING; no RayService field delays that (``upgradeStrategy`` has only
# ``type`` and the incremental upgrade's ``clusterUpgradeOptions``). The incremental upgrade is what can hold:
# ``calculateTrafficRoutedPercent`` moves ``stepSizePercent`` of the traffic per interval, and KubeRay's validation
# takes 0 ("stepSizePercent must be between 0 and 100"). With ``maxSurgePercent`` 100 the pending cluster's Serve
# ``target_capacity`` is raised to 100 in one step (``reconcileServeTargetCapacity``) while its traffic stays at 0, the
# active cluster keeps its 100, and the promotion condition (``IsIncrementalUpgradeComplete``: active capacity 0,
# pending traffic 100) can never hold. Re-applying the spec with the configured strategy then lets KubeRay finish it
# its own way: ``NewCluster`` switches the Services to the ready pending cluster at once; the incremental upgrade
# moves the traffic by its own steps. Re-applying the old ``rayClusterConfig`` under the held strategy is KubeRay's
# incremental rollback (``reconcileRollbackState``: the goal hash is the active cluster's), which removes the pending
# cluster and leaves the active one as it is; under ``NewCluster`` the same apply would start a third cluster.
HELD = "NewClusterWithIncrementalUpgrade"
HOLD_OPTIONS: dict[str, Any] = {"stepSizePercent": 0, "maxSurgePercent": 100, "intervalSeconds": 60}


def held_upgrade_strategy(gateway_class: str) -> dict[str, Any]:
    """The ``upgradeStrategy`` that starts a pending cluster at full Serve capacity and routes it no traffic."""
    return {"type": HELD, "clusterUpgradeOptions": {"gatewayClassName": gateway_class, **HOLD_OPTIONS}}


def is_held(spec: Mapping[str, Any]) -> bool:
    """True when ``spec`` is a held upgrade (``held_upgrade_strategy``): KubeRay never promotes under it."""
    strategy = spec.get("upgradeStrategy") or {}
    options = strategy.get("clusterUpgradeOptions") or {}
    return strategy.get("type") == HELD and options.get("stepSizePercent") == 0


def with_upgrade_strategy(manifest: Mapping[str, Any], strategy: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a RayService manifest with ``spec.upgradeStrategy`` replaced (nothing else: KubeRay's cluster hash
    leaves the strategy out, so the clusters are not touched by the change itself)."""
    out = copy.deepcopy(dict(manifest))
    out["spec"] = {**out.get("spec", {}), "upgradeStrategy": copy.deepcopy(dict(strategy))}
    return out
