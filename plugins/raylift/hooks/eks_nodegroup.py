"""EKS managed node groups: resize them and say how many GPUs they can hold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from airflow.providers.amazon.aws.hooks.eks import EksHook

from raylift.errors import ClusterError


@dataclass(frozen=True)
class NodegroupScaling:
    name: str
    min_size: int
    max_size: int
    desired_size: int
    instance_types: tuple[str, ...]
    status: str
    labels: tuple[tuple[str, str], ...] = ()


class NodegroupTooSmallError(ClusterError):
    """More nodes were asked of a node group than its maxSize allows (raylift never raises it)."""


# The label terraform (modules/eks_ray) puts on the node group the cluster's own controllers (Karpenter) run on.
SYSTEM_LABEL = ("raylift.io/pool", "system")


class EksNodegroupHook(EksHook):
    """The provider's ``EksHook`` plus node group scaling and GPU counting."""

    def scaling(self, cluster: str, nodegroup: str) -> NodegroupScaling:
        from botocore.exceptions import ClientError

        try:
            ng = self.conn.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup)["nodegroup"]
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ResourceNotFoundException":
                raise ClusterError(
                    f"EKS cluster {cluster!r} has no node group {nodegroup!r}: check the target options."
                ) from None
            raise
        cfg = ng.get("scalingConfig") or {}
        return NodegroupScaling(
            name=nodegroup,
            min_size=int(cfg.get("minSize", 0)),
            max_size=int(cfg.get("maxSize", 0)),
            desired_size=int(cfg.get("desiredSize", 0)),
            instance_types=tuple(ng.get("instanceTypes") or ()),
            status=ng.get("status", ""),
            labels=tuple(sorted((ng.get("labels") or {}).items())),
        )

    def scale_nodegroup(self, cluster: str, nodegroup: str, desired: int) -> NodegroupScaling:
        """Set desiredSize within the node group's own maxSize (what terraform set); lower minSize only as far as
        EKS requires (min <= desired). Never raises maxSize: more nodes than the group allows is refused before
        any UpdateNodegroupConfig, so a mistyped worker count cannot start GPU nodes first and fail later."""
        now = self.scaling(cluster, nodegroup)
        if SYSTEM_LABEL in now.labels:
            raise ClusterError(
                f"EKS node group {nodegroup!r} is labelled {SYSTEM_LABEL[0]}={SYSTEM_LABEL[1]}: the cluster's own "
                "controllers (Karpenter) run there, so raylift never resizes it. Point the target at the Ray worker "
                "node group (terraform output eks_nodegroups)."
            )
        if desired > now.max_size:
            raise NodegroupTooSmallError(
                f"EKS node group {cluster}/{nodegroup} allows at most {now.max_size} node(s) (its maxSize; now "
                f"{now.desired_size}), but {desired} were asked for. raylift never raises maxSize: raise "
                f"node_groups[{nodegroup!r}].max_size in the terraform stack and apply it, or ask for fewer nodes. "
                "Nothing was changed."
            )
        if desired == now.desired_size:  # EKS keeps min <= desired: nothing to send
            self.log.info("EKS node group %s/%s already at %d node(s)", cluster, nodegroup, desired)
            return now
        low = min(now.min_size, desired)
        self.conn.update_nodegroup_config(
            clusterName=cluster,
            nodegroupName=nodegroup,
            scalingConfig={"minSize": low, "maxSize": now.max_size, "desiredSize": desired},
        )
        self.log.info("EKS node group %s/%s: desired %d (min %d, max %d)", cluster, nodegroup, desired, low, now.max_size)
        return NodegroupScaling(nodegroup, low, now.max_size, desired, now.instance_types, now.status, now.labels)

    def autoscaling_group(self, cluster: str, nodegroup: str) -> str:
        """The Auto Scaling group EKS runs the node group's instances in (DescribeNodegroup's
        ``resources.autoScalingGroups``): where exactly-these-instances removals go."""
        ng = self.conn.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup)["nodegroup"]
        groups = [g["name"] for g in (ng.get("resources") or {}).get("autoScalingGroups") or [] if g.get("name")]
        if len(groups) != 1:
            raise ClusterError(
                f"EKS node group {cluster}/{nodegroup} lists {len(groups)} Auto Scaling group(s) ({groups}); raylift "
                "removes drained instances from exactly one. Nothing was changed."
            )
        return groups[0]

    def accelerators_per_node(self, instance_type: str, resource: str | None) -> int:
        """How many of the Kubernetes accelerator ``resource`` one ``instance_type`` has, from EC2
        DescribeInstanceTypes: GPUs for ``nvidia.com/gpu``, Neuron devices for ``aws.amazon.com/neuron``, their
        NeuronCores (devices x ``CoreInfo.Count``) for ``aws.amazon.com/neuroncore``, as the Neuron device plugin
        registers them in node allocatable."""
        from raylift.serve.hardware import InstanceShape

        ec2 = AwsBaseHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name, client_type="ec2").conn
        info: dict[str, Any] = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"][0]
        if resource == "aws.amazon.com/neuroncore":
            return InstanceShape.from_ec2(info).neuron_cores
        if resource == "aws.amazon.com/neuron":
            return InstanceShape.from_ec2(info).neuron_devices
        return sum(int(g.get("Count", 0)) for g in (info.get("GpuInfo") or {}).get("Gpus", []))
