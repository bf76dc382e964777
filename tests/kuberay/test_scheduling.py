"""A scheduling oracle for the KubeRay profiles against the terraform EKS example's node pools.

Each profile's head and worker pods (as ``render_rayservice`` writes them) go through a small predicate in the
spirit of kube-scheduler's filters — scheduler name, NodeAffinity (nodeSelector + required terms), TaintToleration,
NodeResourcesFit — against every node the example's managed node groups and Karpenter NodePools can give.
The stand-in Kubernetes API has no scheduler, so without this a Pending pod shows up only on a real cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from raylift.kuberay.manifest import render_rayservice
from raylift.kuberay.profiles import PROFILES, parse_quantity
from tests.infra.eks_pools import Node, Pool, pools, schedulers

SERVE_CONFIG = {"applications": [{"name": "llm", "import_path": "llm.app:build_app", "route_prefix": "/"}]}


def _pods(profile: str) -> dict[str, dict[str, Any]]:
    """``{"head": spec, "<group>": spec}`` of the profile's rendered RayService."""
    cluster = render_rayservice(name="llm", namespace="raylift", serve_config=SERVE_CONFIG, image="img",
                                profile=profile, workers=1)["spec"]["rayClusterConfig"]
    pods = {"head": cluster["headGroupSpec"]["template"]["spec"]}
    pods.update({g["groupName"]: g["template"]["spec"] for g in cluster["workerGroupSpecs"]})
    return pods


def _requests(spec: dict[str, Any]) -> dict[str, float]:
    total: dict[str, float] = {}
    for container in spec["containers"]:
        for name, value in container.get("resources", {}).get("requests", {}).items():
            total[name] = total.get(name, 0.0) + parse_quantity(value, memory=name == "memory")
    return total


def _expression_holds(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        if key not in labels:
            return False
        return int(labels[key]) > int(values[0]) if op == "Gt" else int(labels[key]) < int(values[0])
    raise AssertionError(f"unknown operator {op}")


def _tolerated(taint: dict[str, str], tolerations: list[dict[str, str]]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator", "Equal") == "Exists":
            if not t.get("key") or t["key"] == taint["key"]:
                return True
        elif t.get("key") == taint["key"] and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def why_not(spec: dict[str, Any], node: Node, known_schedulers: set[str]) -> list[str]:
    """Why kube-scheduler would not bind this pod to this node (empty: it fits)."""
    reasons = []
    scheduler = spec.get("schedulerName", "default-scheduler")
    if scheduler not in known_schedulers:
        reasons.append(f"no scheduler {scheduler!r} is installed")
    wrong = {k: v for k, v in spec.get("nodeSelector", {}).items() if node.labels.get(k) != v}
    if wrong:
        reasons.append(f"nodeSelector {wrong} does not match")
    terms = (spec.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {})
             .get("nodeSelectorTerms"))
    if terms and not any(all(_expression_holds(e, node.labels) for e in t.get("matchExpressions", [])) for t in terms):
        reasons.append("required node affinity does not match")
    for taint in node.taints:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not _tolerated(taint, spec.get("tolerations", [])):
            reasons.append(f"untolerated taint {taint['key']}={taint.get('value', '')}:{taint['effect']}")
    for name, amount in _requests(spec).items():
        if amount > node.allocatable.get(name, 0.0) + 1e-9:
            reasons.append(f"{name} {amount:g} > allocatable {node.allocatable.get(name, 0.0):g}")
    return reasons


def per_node(spec: dict[str, Any], node: Node) -> int:
    """How many of these pods one node holds (resources only)."""
    return int(min(node.allocatable.get(k, 0.0) // v for k, v in _requests(spec).items() if v > 0))


def placements(spec: dict[str, Any], all_pools: list[Pool], known: set[str]) -> dict[str, list[Node]]:
    """Pool name -> the nodes of that pool the pod fits on."""
    fit: dict[str, list[Node]] = {}
    for pool in all_pools:
        nodes = [n for n in pool.nodes if not why_not(spec, n, known)]
        if nodes:
            fit[pool.name] = nodes
    return fit


def unschedulable(all_pools: list[Pool], known: set[str]) -> dict[str, str]:
    """``"<profile>/<pod>" -> why`` for every profile pod no pool can run (closest pool's reasons)."""
    found = {}
    for profile in sorted(PROFILES):
        for pod, spec in _pods(profile).items():
            if placements(spec, all_pools, known):
                continue
            reasons = {p.name: why_not(spec, n, known) for p in all_pools for n in p.nodes[:1]}
            found[f"{profile}/{pod}"] = "; ".join(f"{p}: {', '.join(r)}" for p, r in sorted(reasons.items()))
    return found


@pytest.fixture(scope="module")
def cluster() -> tuple[list[Pool], set[str]]:
    return pools(), schedulers()


def test_the_example_has_the_pools_the_profiles_expect(cluster: tuple[list[Pool], set[str]]) -> None:
    all_pools, known = cluster
    assert {p.name for p in all_pools if p.kind == "nodepool"} == {"karpenter/ray-head"}
    assert {p.name for p in all_pools if p.kind == "nodegroup"} == {"gpu", "graviton", "x86", "inferentia", "system"}
    assert [p.name for p in all_pools if p.system] == ["system"], "exactly one system node group runs Karpenter"
    assert "my-scheduler" in known


def test_every_profile_pod_has_a_pool_that_can_run_it(cluster: tuple[list[Pool], set[str]]) -> None:
    assert unschedulable(*cluster) == {}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_node_group_raylift_scales_runs_the_workers_and_is_no_system_pool(
    profile: str, cluster: tuple[list[Pool], set[str]]
) -> None:
    """scale/teardown resize the profile's node group: it must run the worker pods, hold max_replicas of them,
    and never be the system group (teardown scales it to 0)."""
    all_pools, known = cluster
    node_profile = PROFILES[profile]
    [group] = [p for p in all_pools if p.kind == "nodegroup" and p.name == node_profile.nodegroup]
    assert not group.system, f"{profile} scales the system node group {group.name!r}; teardown would empty it"
    pods = _pods(profile)
    for worker in node_profile.workers:
        spec = pods[worker.group_name]
        nodes = [n for n in group.nodes if not why_not(spec, n, known)]
        assert nodes, f"{profile}: node group {group.name} cannot run worker pods: {why_not(spec, group.nodes[0], known)}"
        assert group.max_pods(per_node(spec, nodes[0]), nodes[0]) >= worker.max_replicas


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_head_does_not_depend_on_the_worker_group(profile: str, cluster: tuple[list[Pool], set[str]]) -> None:
    """With 0 workers raylift scales the worker group to 0 nodes: the head needs a pool of its own."""
    all_pools, known = cluster
    fit = placements(_pods(profile)["head"], all_pools, known)
    assert set(fit) - {PROFILES[profile].nodegroup}, f"{profile} head fits only {sorted(fit)}"


def owners(all_pools: list[Pool], known: set[str]) -> dict[str, list[str]]:
    """``"<profile>/<pod>" -> [pools that can run it]`` for every profile pod."""
    return {f"{profile}/{pod}": sorted(placements(spec, all_pools, known))
            for profile in sorted(PROFILES) for pod, spec in _pods(profile).items()}


def test_each_profile_pod_has_exactly_one_pool_that_can_run_it(cluster: tuple[list[Pool], set[str]]) -> None:
    """One owner per pool: were a managed node group and a Karpenter NodePool both able to run a pod, a Pending pod
    would have both add a node for it (raylift resizing the group, Karpenter launching one), and raylift's capacity
    arithmetic would be off. Workers belong to their profile's node group, heads to Karpenter's ray-head pool."""
    all_pools, known = cluster
    found = owners(all_pools, known)
    shared = {pod: pools for pod, pools in found.items() if len(pools) > 1}
    assert shared == {}, f"pods more than one pool can run: {shared}"
    for profile, node_profile in PROFILES.items():
        assert found[f"{profile}/head"] == ["karpenter/ray-head"]
        for worker in node_profile.workers:
            assert found[f"{profile}/{worker.group_name}"] == [node_profile.nodegroup]


def test_the_ownership_check_sees_a_pool_shared_by_a_node_group_and_karpenter(
    cluster: tuple[list[Pool], set[str]]
) -> None:
    """The oracle itself: a NodePool with the graviton node group's labels (what the stack had) shares its workers."""
    all_pools, known = cluster
    [group] = [p for p in all_pools if p.name == "graviton"]
    twin = Pool("karpenter/graviton", "nodepool", [
        Node(n.instance_type, {k: v for k, v in n.labels.items() if k != "raylift.io/nodegroup"}, n.taints,
             n.allocatable) for n in group.nodes])
    spec = _pods("graviton")["cpu-arm"]
    without_selector = {**spec, "nodeSelector": {k: v for k, v in spec["nodeSelector"].items()
                                                 if k != "raylift.io/nodegroup"}}
    assert sorted(placements(without_selector, [*all_pools, twin], known)) == ["graviton", "karpenter/graviton"]
    assert sorted(placements(spec, [*all_pools, twin], known)) == ["graviton"]


def test_the_predicate_follows_kube_scheduler() -> None:
    """The oracle itself: a taint needs a toleration, selectors and affinity must match, requests must fit."""
    node = Node("g5.12xlarge", {"kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "g5.12xlarge"},
                ({"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},), {"cpu": 47.0, "memory": 180.0, "nvidia.com/gpu": 4})
    pod = {"containers": [{"resources": {"requests": {"cpu": "2", "memory": "8Gi"}}}], "nodeSelector": {"kubernetes.io/arch": "amd64"}}
    known = {"default-scheduler"}
    assert why_not(pod, node, known) == ["untolerated taint nvidia.com/gpu=true:NoSchedule"]
    tolerant = {**pod, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    assert why_not(tolerant, node, known) == []
    assert why_not({**tolerant, "nodeSelector": {"kubernetes.io/arch": "arm64"}}, node, known)
    assert why_not({**tolerant, "schedulerName": "my-scheduler"}, node, known) == ["no scheduler 'my-scheduler' is installed"]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g5.xlarge"]}]}]}}}
    assert why_not({**tolerant, "affinity": affinity}, node, known) == ["required node affinity does not match"]
    big = {**tolerant, "containers": [{"resources": {"requests": {"nvidia.com/gpu": "5"}}}]}
    assert why_not(big, node, known) == ["nvidia.com/gpu 5 > allocatable 4"]


def test_quantities_are_read_by_kubernetes_own_parser() -> None:
    # forms the API server takes that a suffix table misses: exponents and the exa/peta suffixes
    assert parse_quantity("1e3") == 1000.0 and parse_quantity("2P") == 2e15
    assert parse_quantity("1Ei", memory=True) == 2.0**30 and parse_quantity("500m") == 0.5
    assert parse_quantity("24Gi", memory=True) == 24.0 and parse_quantity(4) == 4.0
    with pytest.raises(ValueError):
        parse_quantity("12 cores")
