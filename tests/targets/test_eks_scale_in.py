"""The EKS scale step drains Ray before it removes workers: moto holds the EKS node group, the Auto Scaling group
EKS names for it and its EC2 instances; botocore's event hooks record raylift's AWS calls into the same timeline
as the Kubernetes stand-in's (``tests.fixtures.kube_rayclusters``: the drain Job checked by the ``V1Job`` model, the
RayCluster patch applied as JSON Patch and checked against KubeRay's RayCluster CRD)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
from typing import Any

import boto3
import pytest

from raylift.errors import ClusterError
from raylift.hooks.kuberay import KubeRayHook
from raylift.kuberay.drain import DRAIN_REASON, DRAIN_SCRIPT
from raylift.kuberay.manifest import render_rayservice
from raylift.operators.cluster import ScaleClusterOperator
from tests.aws.moto_resources import eks_nodegroups
from tests.fixtures.kube_rayclusters import KubeRayClustersStandIn, kube_rayclusters, ray_pod  # noqa: F401
from tests.kuberay.serve_configs import serve_config

NS, SERVICE, CLUSTER = "raylift", "llm", "llm-raycluster-x7k2p"
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-vllm:abc"
OPTIONS = {"cluster_name": "ray", "worker_nodegroup": "gpu", "kubernetes_conn_id": "kubernetes_default",
           "namespace": NS, "rayservice_name": SERVICE, "bucket": "raylift-state", "image": IMAGE, "accelerators_per_node": 1}


def node_group_with_instances(count: int, *, min_size: int = 0) -> list[tuple[str, str]]:
    """The ``gpu`` node group at ``count`` nodes and the Auto Scaling group EKS runs them in (moto's EKS names one
    in DescribeNodegroup but does not create it: made here under that name). Each instance's (id, private IP),
    sorted by id."""
    s3 = boto3.client("s3")  # the target's state store (the scale step records the worker count)
    s3.create_bucket(Bucket="raylift-state", **({} if s3.meta.region_name == "us-east-1" else {
        "CreateBucketConfiguration": {"LocationConstraint": s3.meta.region_name}}))
    eks_nodegroups("ray", {"gpu": {"instanceTypes": ["g5.2xlarge"], "min": min_size, "max": 4, "desired": count}})
    ng = boto3.client("eks").describe_nodegroup(clusterName="ray", nodegroupName="gpu")["nodegroup"]
    ec2, asg = boto3.client("ec2"), boto3.client("autoscaling")
    ec2.create_launch_template(LaunchTemplateName="gpu", LaunchTemplateData={"ImageId": "ami-12c6146b",
                                                                            "InstanceType": "g5.2xlarge"})
    asg.create_auto_scaling_group(
        AutoScalingGroupName=ng["resources"]["autoScalingGroups"][0]["name"], MinSize=min_size, MaxSize=4,
        DesiredCapacity=count, LaunchTemplate={"LaunchTemplateName": "gpu"}, VPCZoneIdentifier=ng["subnets"][0])
    ids = [i["InstanceId"] for i in asg_state()["Instances"]]
    described = ec2.describe_instances(InstanceIds=ids)["Reservations"]
    return sorted((i["InstanceId"], i["PrivateIpAddress"]) for r in described for i in r["Instances"])


def asg_state() -> dict[str, Any]:
    name = boto3.client("eks").describe_nodegroup(clusterName="ray", nodegroupName="gpu")["nodegroup"]["resources"][
        "autoScalingGroups"][0]["name"]
    group: dict[str, Any] = boto3.client("autoscaling").describe_auto_scaling_groups(
        AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
    return group


def ray_service(kube: KubeRayClustersStandIn, workers: int, pods: list[dict[str, Any]]) -> None:
    """The RayService (applied as raylift does), its active RayCluster as KubeRay makes it from
    ``rayClusterConfig``, and the cluster's Ray pods."""
    manifest = render_rayservice(name=SERVICE, namespace=NS, serve_config=serve_config(), image=IMAGE,
                                 profile="gpu-vllm", workers=workers)
    KubeRayHook("kubernetes_default").apply_rayservice(manifest)
    kube.write_status(NS, SERVICE, {"activeServiceStatus": {"rayClusterName": CLUSTER}})
    kube.rayclusters[(NS, CLUSTER)] = {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": CLUSTER, "namespace": NS, "resourceVersion": "7"},
        "spec": manifest["spec"]["rayClusterConfig"],
        "status": {"head": {"serviceName": f"{CLUSTER}-head-svc"}},
    }
    kube.ray_pods[(NS, CLUSTER)] = pods


def three_workers(kube: KubeRayClustersStandIn, instances: list[tuple[str, str]]) -> None:
    """Workers a, b, c on the three instances; the head shares the first (no head node group)."""
    (_, ip0), (_, ip1), (_, ip2) = instances
    ray_service(kube, 3, [
        ray_pod(f"{CLUSTER}-head", CLUSTER, pod_ip="10.0.1.200", host_ip=ip0),
        ray_pod("w-a", CLUSTER, group="gpu", pod_ip="10.0.1.201", host_ip=ip0),
        ray_pod("w-b", CLUSTER, group="gpu", pod_ip="10.0.1.202", host_ip=ip1),
        ray_pod("w-c", CLUSTER, group="gpu", pod_ip="10.0.1.203", host_ip=ip2),
    ])


def scale_op(workers: int, **options: Any) -> ScaleClusterOperator:
    return ScaleClusterOperator(task_id="scale", workers=workers, target="eks", deferrable=True,
                                target_options={**OPTIONS, **options})


def record_calls(op: ScaleClusterOperator, timeline: list[tuple[str, Any]]) -> None:
    """Every EKS and Auto Scaling call raylift makes, as botocore sends it, into the stand-in's timeline."""
    def before(params: dict[str, Any], model: Any, **_: Any) -> None:
        timeline.append((model.name, dict(params)))

    target: Any = op.target_impl
    target._eks().conn.meta.events.register("provide-client-params.eks", before)
    target._asg.conn.meta.events.register("provide-client-params.autoscaling", before)


def changes(timeline: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """What changes the cluster, in order: the drain Job, the RayCluster patch (and KubeRay's deletions), the
    instance terminations and the node group resizes."""
    keep = {"CreateJob", "PatchRayCluster", "KubeRayDeletedPods", "TerminateInstanceInAutoScalingGroup",
            "UpdateNodegroupConfig"}
    out = []
    for name, params in timeline:
        if name not in keep:
            continue
        if name == "TerminateInstanceInAutoScalingGroup":
            params = (params["InstanceId"], params["ShouldDecrementDesiredCapacity"])
        elif name == "UpdateNodegroupConfig":
            params = params["scalingConfig"]["desiredSize"]
        elif name == "PatchRayCluster":
            params = {op["path"]: op["value"] for op in params if op["op"] != "test"}
        out.append((name, params))
    return out


def resume(op: ScaleClusterOperator, deferred: Any, timeline: list[tuple[str, Any]]) -> dict[str, Any]:
    """What Airflow does after the deferral: the trigger rebuilt from ``serialize()`` waits in the triggerer, a
    fresh operator resumes with the plan from the deferral's kwargs."""
    path, kwargs = deferred.trigger.serialize()
    module, name = path.rsplit(".", 1)
    trigger = getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))
    event = trigger.wait()
    resumed = ScaleClusterOperator(task_id="scale", workers=op.workers, target="eks", deferrable=True,
                                   target_options=op.target_options)
    record_calls(resumed, timeline)
    result: dict[str, Any] = resumed.execute_complete({}, event, **json.loads(json.dumps(deferred.kwargs)))
    return result


def test_scale_in_drains_the_chosen_pods_then_removes_exactly_their_instances(
        aws: str, kube_rayclusters: KubeRayClustersStandIn) -> None:  # noqa: F811
    from airflow.sdk.exceptions import TaskDeferred

    kube = kube_rayclusters
    instances = node_group_with_instances(3)
    (i0, _), (i1, _), (i2, _) = instances
    three_workers(kube, instances)
    op = scale_op(1)
    record_calls(op, kube.timeline)

    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    assert changes(kube.timeline) == [("CreateJob", None)]  # nothing removed while Ray drains
    (job,) = kube.posted
    assert job["spec"]["activeDeadlineSeconds"] == 600 and job["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
    args = json.loads(job["spec"]["template"]["spec"]["containers"][0]["command"][-1])
    assert args["ips"] == ["10.0.1.202", "10.0.1.203"]  # w-b and w-c: the head's instance never goes
    assert (args["gcs"], args["reason"]) == (f"{CLUSTER}-head-svc.{NS}.svc:6379", "DRAIN_NODE_REASON_PREEMPTION")
    kube.finish(NS, job["metadata"]["name"], exit_code=0)  # the Job controller: Ray listed both nodes DEAD

    want = resume(op, deferred.value, kube.timeline)

    assert changes(kube.timeline) == [
        ("CreateJob", None),
        ("PatchRayCluster", {"/spec/workerGroupSpecs/0/replicas": 1, "/spec/workerGroupSpecs/0/minReplicas": 1,
                             "/spec/workerGroupSpecs/0/scaleStrategy": {"workersToDelete": ["w-b", "w-c"]}}),
        ("KubeRayDeletedPods", ["w-b", "w-c"]),
        ("TerminateInstanceInAutoScalingGroup", (i1, True)),
        ("TerminateInstanceInAutoScalingGroup", (i2, True)),
        ("UpdateNodegroupConfig", 1),  # the plain scale that follows: EKS's desiredSize to match
    ]
    assert want["nodes"] == 1
    group = asg_state()
    assert group["DesiredCapacity"] == 1 and [i["InstanceId"] for i in group["Instances"]] == [i0]
    states = {i["InstanceId"]: i["State"]["Name"] for r in boto3.client("ec2").describe_instances(
        InstanceIds=[i0, i1, i2])["Reservations"] for i in r["Instances"]}
    assert states[i0] == "running" and {states[i1], states[i2]} <= {"shutting-down", "terminated"}
    assert [p["metadata"]["name"] for p in kube.ray_pods[(NS, CLUSTER)]] == [f"{CLUSTER}-head", "w-a"]
    assert kube.rayclusters[(NS, CLUSTER)]["spec"]["workerGroupSpecs"][0]["replicas"] == 1


def test_a_drain_past_its_deadline_fails_the_step_naming_the_pods_and_leaves_capacity(
        aws: str, kube_rayclusters: KubeRayClustersStandIn) -> None:  # noqa: F811
    from airflow.sdk.exceptions import TaskDeferred

    kube = kube_rayclusters
    instances = node_group_with_instances(3)
    three_workers(kube, instances)
    op = scale_op(2, drain_timeout_s=30)
    record_calls(op, kube.timeline)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    (job,) = kube.posted
    assert job["spec"]["activeDeadlineSeconds"] == 30
    kube.finish(NS, job["metadata"]["name"], exit_code=1, reason="DeadlineExceeded")  # Kubernetes ends the Job

    with pytest.raises(ClusterError, match=rf"Ray did not finish draining node\(s\) w-b \(10.0.1.202 on "
                                           rf"{instances[1][0]}\).*DeadlineExceeded.*capacity was not changed"):
        resume(op, deferred.value, kube.timeline)

    assert changes(kube.timeline) == [("CreateJob", None)]  # no patch, no termination, no resize
    assert asg_state()["DesiredCapacity"] == 3 and len(kube.ray_pods[(NS, CLUSTER)]) == 4


@pytest.mark.parametrize("workers", [3, 4])
def test_scale_out_and_the_same_count_resize_as_before_without_a_drain(
        aws: str, kube_rayclusters: KubeRayClustersStandIn, workers: int) -> None:  # noqa: F811
    kube = kube_rayclusters
    three_workers(kube, node_group_with_instances(3))
    op = scale_op(workers)
    record_calls(op, kube.timeline)

    op.execute({})

    assert changes(kube.timeline) == ([("UpdateNodegroupConfig", workers)] if workers != 3 else [])
    assert kube.posted == []


def test_a_scale_in_below_the_groups_min_size_is_refused_before_any_drain(
        aws: str, kube_rayclusters: KubeRayClustersStandIn) -> None:  # noqa: F811
    kube = kube_rayclusters
    three_workers(kube, node_group_with_instances(3, min_size=2))
    op = scale_op(1)
    record_calls(op, kube.timeline)

    with pytest.raises(ClusterError, match=r"removes 2 of its 3 instance\(s\).*from 3 to 1, below its MinSize 2"):
        op.execute({})
    assert changes(kube.timeline) == [] and kube.posted == []


def test_the_drain_script_compiles_and_calls_ray_apis_that_exist() -> None:
    """The script the Job runs, against the Ray of the runtime venv (what the images install): its state API call
    takes the arguments used, and ``ray drain-node`` has the options used."""
    from tests.harness.local_stack import ROOT

    compile(DRAIN_SCRIPT, "drain", "exec")
    python, ray = ROOT / ".cache/venvs/runtime/bin/python", ROOT / ".cache/venvs/runtime/bin/ray"
    if not python.exists():
        pytest.fail("runtime venv missing (make setup)")
    check = ("import inspect; from ray.util.state import list_nodes; from ray.util.state.common import NodeState; "
             "p = inspect.signature(list_nodes).parameters; assert {'address', 'limit', 'raise_on_missing_output'} "
             "<= set(p), p; f = NodeState.__dataclass_fields__; assert {'node_id', 'node_ip', 'state', "
             "'is_head_node'} <= set(f), f")
    subprocess.run([str(python), "-c", check], check=True, timeout=120)
    helptext = subprocess.run([str(ray), "drain-node", "--help"], check=True, capture_output=True, text=True,
                              timeout=120).stdout
    used = set(re.findall(r'"(--[a-z-]+)"', DRAIN_SCRIPT))  # the options the script passes
    assert used >= {"--address", "--node-id", "--reason", "--deadline-remaining-seconds"}, used
    for option in (*sorted(used), DRAIN_REASON):
        assert option in helptext, option
