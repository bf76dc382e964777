"""EKS node group scaling against moto."""

from __future__ import annotations

import boto3
import pytest

from raylift.errors import ClusterError
from raylift.hooks.eks_nodegroup import EksNodegroupHook
from tests.aws.moto_resources import eks_nodegroups


def test_scale_nodegroup_stays_within_max_and_lowers_min_only_as_needed(aws: str) -> None:
    """maxSize is terraform's: more nodes than it allows is refused with nothing changed."""
    eks_nodegroups("ray", {"gpu": {"instanceTypes": ["g5.12xlarge"], "min": 1, "max": 2, "desired": 1}})
    hook = EksNodegroupHook(aws_conn_id="aws_default")
    with pytest.raises(ClusterError, match=r"allows at most 2 node\(s\).*but 3 were asked for.*never raises maxSize"):
        hook.scale_nodegroup("ray", "gpu", 3)
    cfg = boto3.client("eks").describe_nodegroup(clusterName="ray", nodegroupName="gpu")["nodegroup"]["scalingConfig"]
    assert cfg == {"minSize": 1, "maxSize": 2, "desiredSize": 1}
    hook.scale_nodegroup("ray", "gpu", 2)
    hook.scale_nodegroup("ray", "gpu", 0)
    now = hook.scaling("ray", "gpu")
    assert (now.min_size, now.max_size, now.desired_size) == (0, 2, 0)
    assert now.instance_types == ("g5.12xlarge",)


def test_missing_nodegroup_is_a_cluster_error(aws: str) -> None:
    eks_nodegroups("ray", {"gpu": {"instanceTypes": ["g5.12xlarge"], "min": 0, "max": 1, "desired": 0}})
    with pytest.raises(ClusterError, match="has no node group 'cpu'"):
        EksNodegroupHook(aws_conn_id="aws_default").scale_nodegroup("ray", "cpu", 1)


def test_accelerators_per_node_from_ec2_instance_types(aws: str) -> None:
    """In the unit of the Kubernetes resource a profile's pods ask for, as the device plugins register them."""
    hook = EksNodegroupHook(aws_conn_id="aws_default")
    assert hook.accelerators_per_node("g5.12xlarge", "nvidia.com/gpu") == 4
    assert hook.accelerators_per_node("m5.large", "nvidia.com/gpu") == 0
    assert hook.accelerators_per_node("inf2.48xlarge", "aws.amazon.com/neuroncore") == 24
    assert hook.accelerators_per_node("inf2.48xlarge", "aws.amazon.com/neuron") == 12
    assert hook.accelerators_per_node("g5.12xlarge", "aws.amazon.com/neuroncore") == 0


def test_the_system_node_group_is_never_resized(aws: str) -> None:
    """Karpenter runs on the system group: scaling it (teardown: to 0) would remove the cluster's controllers."""
    eks_nodegroups("ray", {"system": {"instanceTypes": ["m7g.2xlarge"], "min": 2, "max": 4, "desired": 2,
                                      "labels": {"raylift.io/pool": "system"}}})
    with pytest.raises(ClusterError, match="never resizes it"):
        EksNodegroupHook(aws_conn_id="aws_default").scale_nodegroup("ray", "system", 0)
    cfg = boto3.client("eks").describe_nodegroup(clusterName="ray", nodegroupName="system")["nodegroup"]["scalingConfig"]
    assert cfg["desiredSize"] == 2
