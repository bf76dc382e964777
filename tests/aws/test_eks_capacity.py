"""EKS capacity does not churn: node groups in moto behind the recording proxy, the RayService through the
Kubernetes API stand-in. The proxy sees every EKS request raylift sends, so "no UpdateNodegroupConfig" is read off
the wire, and the node group's scalingConfig off moto."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import boto3
import pytest

from raylift.errors import ClusterError
from raylift.hooks.eks_nodegroup import EksNodegroupHook
from raylift.kuberay.manifest import render_rayservice
from raylift.kuberay.upgrade import ClusterChange, cluster_change, starts_new_cluster
from raylift.targets import get_target
from raylift.targets.eks import EksTarget
from tests.aws.moto_resources import eks_nodegroups
from tests.aws.standins import Proxy
from tests.fixtures.kube_api import KubeApiStandIn, kube_api  # noqa: F401 - fixture
from tests.kuberay.serve_configs import serve_config

BUCKET = "raylift-models"
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-vllm:abc"


@pytest.fixture()
def infra(s3_proxy: Proxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Proxy:
    """moto behind the proxy (``aws_default`` points at it), a bucket for the target's state, one GPU node group
    (g5.2xlarge: one A10G each; maxSize 4, as terraform's default ``gpu`` group)."""
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
    boto3.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    eks_nodegroups("ray", {"gpu": {"instanceTypes": ["g5.2xlarge"], "min": 0, "max": 4, "desired": 0}})
    return s3_proxy


def target(**extra: object) -> EksTarget:
    """A fresh target, as each Airflow task builds its own (one GPU per node, as a g5.2xlarge has)."""
    options = {
        "cluster_name": "ray", "worker_nodegroup": "gpu", "kubernetes_conn_id": "kubernetes_default",
        "namespace": "raylift", "rayservice_name": "llm", "bucket": BUCKET, "image": IMAGE, "hf_home": "/mnt/models",
        "accelerators_per_node": 1,
    } | extra  # fmt: skip
    t = get_target("eks", **json.loads(json.dumps(options)))
    assert isinstance(t, EksTarget)
    return t


def release(workers: int, model: str, **extra: object) -> None:
    """One raylift_deploy run's EKS side: the scale step, then the deploy's apply."""
    t = target(**extra)
    t.scale(workers=workers)
    t.apply_serve_config(serve_config(model=model))


def scaling() -> dict[str, int]:
    cfg: dict[str, int] = boto3.client("eks").describe_nodegroup(clusterName="ray", nodegroupName="gpu")["nodegroup"][
        "scalingConfig"
    ]
    return cfg


def live(kube_api: KubeApiStandIn) -> dict[str, Any]:  # noqa: F811
    """The RayService as the stand-in stores it."""
    obj = kube_api.stored("raylift", "llm")
    assert obj is not None
    return obj


def nodegroup_updates(proxy: Proxy) -> list[dict[str, Any]]:
    """Every UpdateNodegroupConfig that reached the proxy (EKS: POST .../node-groups/{name}/update-config)."""
    return [json.loads(body) for path, body in proxy.bodies if path.endswith("/update-config")]


def test_serve_config_only_redeploys_leave_the_node_group_alone(infra: Proxy, kube_api: KubeApiStandIn) -> None:  # noqa: F811
    """KubeRay applies a serveConfigV2-only change in place: no second cluster, so no nodes for one."""
    release(2, "first")
    assert scaling() == {"minSize": 0, "maxSize": 4, "desiredSize": 2}
    assert [u["scalingConfig"] for u in nodegroup_updates(infra)] == [{"minSize": 0, "maxSize": 4, "desiredSize": 2}]
    infra.bodies.clear()

    release(2, "second")
    release(2, "third")
    target().rollback()  # back to "second": the same cluster config, in place as well
    assert nodegroup_updates(infra) == []
    assert scaling() == {"minSize": 0, "maxSize": 4, "desiredSize": 2}
    assert live(kube_api)["metadata"]["generation"] == 4  # each one was applied
    assert "model_id: second" in live(kube_api)["spec"]["serveConfigV2"]


def test_only_a_cluster_change_sizes_for_two_clusters_and_never_past_max(
    infra: Proxy, kube_api: KubeApiStandIn  # noqa: F811
) -> None:
    """A new image changes rayClusterConfig: NewCluster runs old and new side by side, so 2 x 2 GPUs, within the
    maxSize terraform set. The next run's worker count (replicas: the autoscaler's, muted by KubeRay) is in place."""
    new_image = IMAGE.replace(":abc", ":def")
    release(2, "first")
    infra.bodies.clear()
    target(image=new_image).apply_serve_config(serve_config(model="first"))
    assert scaling() == {"minSize": 0, "maxSize": 4, "desiredSize": 4}
    release(3, "first", image=new_image)  # 3 workers on the running cluster: 3 nodes, not 2 x 3 (past maxSize)
    assert [u["scalingConfig"] for u in nodegroup_updates(infra)] == [
        {"minSize": 0, "maxSize": 4, "desiredSize": 4},
        {"minSize": 0, "maxSize": 4, "desiredSize": 3},
    ]
    assert live(kube_api)["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] == 3


def test_workers_beyond_max_are_refused_before_any_resize(infra: Proxy, kube_api: KubeApiStandIn) -> None:  # noqa: F811
    release(1, "first")
    infra.bodies.clear()
    with pytest.raises(ClusterError, match=r"of 64 worker\(s\) needs 64 nvidia.com/gpu = 64 node\(s\) of node group "
                       r"'gpu', which allows at most 4 \(its maxSize.*Deploy at most 4 worker\(s\), or raise "
                       r"node_groups\['gpu'\].max_size to 64"):
        target().scale(workers=64)
    with pytest.raises(ClusterError, match=r"allows at most 4 node\(s\) .*but 5 were asked for"):
        EksNodegroupHook(aws_conn_id="aws_default").scale_nodegroup("ray", "gpu", 5)
    assert nodegroup_updates(infra) == []
    assert scaling() == {"minSize": 0, "maxSize": 4, "desiredSize": 1}
    assert target().recorded_workers() == 1  # the refused scale recorded nothing


def test_a_new_cluster_beyond_max_is_refused_before_any_resize(infra: Proxy, kube_api: KubeApiStandIn) -> None:  # noqa: F811
    release(3, "first")
    infra.bodies.clear()
    with pytest.raises(ClusterError, match=r"A NewCluster upgrade of 3 worker\(s\) needs 6 nvidia.com/gpu = 6 node\(s\)"
                       r".*at most 4.*Deploy at most 2 worker\(s\), or raise node_groups\['gpu'\].max_size to 6"):
        target(image=IMAGE.replace(":abc", ":def")).apply_serve_config(serve_config(model="first"))
    assert nodegroup_updates(infra) == []
    assert scaling()["desiredSize"] == 3
    assert live(kube_api)["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"][
        "containers"][0]["image"] == IMAGE  # nothing applied


def test_an_image_change_on_a_full_node_group_names_the_way_through(infra: Proxy,
                                                                     kube_api: KubeApiStandIn) -> None:  # noqa: F811
    """The seed shapes' case (inferentia: maxSize 1, one node a cluster): a new image needs a second cluster's nodes
    whatever the release; the refusal says which variable to raise and to what, that release: direct needs the same
    room, and the outage alternative, and never advises upgrade_strategy 'None' (KubeRay would not roll it out)."""
    release(4, "first")  # all four nodes of the group: a second cluster has no room
    infra.bodies.clear()
    with pytest.raises(ClusterError) as refused:
        target(image=IMAGE.replace(":abc", ":def")).apply_serve_config(serve_config(model="first"))
    message = str(refused.value)
    assert "raise node_groups['gpu'].max_size to 8 in the terraform stack for this release" in message, message
    assert "with release: direct as with blue/green" in message and "raylift_teardown" in message, message
    assert "Deploy at most 2 worker(s)" in message and "'None' is no way through" in message, message
    assert nodegroup_updates(infra) == [] and scaling()["desiredSize"] == 4


def test_the_autoscaler_is_never_offered_more_pods_than_the_node_group_can_hold(infra: Proxy) -> None:
    """gpu-vllm's worker group scales to 8 pods, but node group gpu holds at most 4 g5.2xlarge (one GPU each) and no
    cluster autoscaler grows it: KubeRay's in-tree autoscaler is bounded to 4 (never below the running workers)."""
    def bounded(workers: int, **extra: object) -> dict[str, Any]:
        t = target(**extra)
        manifest = t.render(serve_config(model="first"), workers)
        t._bound_max_replicas(manifest, workers)  # what apply_serve_config and hold_candidate apply
        (group,) = manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"]
        return dict(group)

    group = bounded(2)
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 2, 4)
    assert bounded(6)["maxReplicas"] == 6  # what runs is never cut (six workers are refused by the scale step)
    assert bounded(2, accelerators_per_node=4)["maxReplicas"] == 8  # four g5.12xlarge hold the profile's 8


def test_the_applied_rayservice_carries_the_bound(infra: Proxy, kube_api: KubeApiStandIn) -> None:  # noqa: F811
    release(2, "first")
    (group,) = live(kube_api)["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert (group["replicas"], group["maxReplicas"]) == (2, 4)


def _spec(workers: int = 2, image: str = IMAGE, strategy: str = "NewCluster", model: str = "first") -> dict[str, Any]:
    spec: dict[str, Any] = render_rayservice(
        name="llm", namespace="raylift", serve_config=serve_config(model=model), image=image, profile="gpu-vllm",
        workers=workers, upgrade_strategy=strategy,
    )["spec"]  # fmt: skip
    return spec


def test_kuberays_rules_for_a_new_cluster() -> None:
    """What KubeRay's RayService controller hashes: replicas and their bounds are the autoscaler's, appended
    worker groups update the running cluster, anything else in rayClusterConfig replaces it (unless 'None')."""
    live = _spec()
    assert cluster_change(None, live) is ClusterChange.CREATE
    assert cluster_change(live, _spec(model="second")) is ClusterChange.IN_PLACE
    assert cluster_change(live, _spec(workers=5)) is ClusterChange.IN_PLACE
    more = copy.deepcopy(live)
    more["rayClusterConfig"]["workerGroupSpecs"].append({**more["rayClusterConfig"]["workerGroupSpecs"][0],
                                                         "groupName": "extra"})
    assert cluster_change(live, more) is ClusterChange.ADD_GROUPS
    assert cluster_change(more, live) is ClusterChange.NEW_CLUSTER  # a group removed
    new_image = _spec(image=IMAGE.replace(":abc", ":def"))
    assert cluster_change(live, new_image) is ClusterChange.NEW_CLUSTER
    assert starts_new_cluster(live, new_image)
    assert not starts_new_cluster(live, _spec(image=IMAGE.replace(":abc", ":def"), strategy="None"))
    assert not starts_new_cluster(live, _spec(model="second"))
