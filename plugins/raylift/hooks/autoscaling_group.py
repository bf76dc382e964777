"""The EC2 Auto Scaling group behind an EKS managed node group: its instances, and removing chosen ones.

Why not UpdateNodegroupConfig: lowering a node group's desiredSize lets the Auto Scaling group pick which
instances go, so Ray loses whatever ran there. ``TerminateInstanceInAutoScalingGroup`` with
``ShouldDecrementDesiredCapacity=True`` removes exactly the named instance and lowers the group's desired
capacity by one, so nothing replaces it (what Kubernetes' Cluster Autoscaler does on managed node groups).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

from raylift.errors import ClusterError

IN_SERVICE = "InService"


@dataclass(frozen=True)
class GroupInstance:
    """One instance of the group: its id, lifecycle state and primary private IP (the Kubernetes node's
    InternalIP, so the ``status.hostIP`` of the pods on it)."""

    instance_id: str
    lifecycle_state: str
    private_ip: str


@dataclass(frozen=True)
class GroupCapacity:
    name: str
    min_size: int
    max_size: int
    desired: int
    instances: tuple[GroupInstance, ...]

    def in_service(self) -> list[GroupInstance]:
        return [i for i in self.instances if i.lifecycle_state == IN_SERVICE]


class AutoScalingGroupHook(AwsBaseHook):
    """``autoscaling`` client plus EC2 DescribeInstances for the instances' private IPs."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(client_type="autoscaling", **kwargs)

    def capacity(self, group: str) -> GroupCapacity:
        """The group's sizes and instances (with their private IPs); ClusterError when AWS does not know it."""
        found = self.conn.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"]
        if not found:
            raise ClusterError(f"Auto Scaling group {group!r} (the node group's, per DescribeNodegroup) does not exist.")
        asg = found[0]
        ids = [i["InstanceId"] for i in asg.get("Instances") or []]
        ips: dict[str, str] = {}
        if ids:
            ec2 = AwsBaseHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name, client_type="ec2").conn
            for page in ec2.get_paginator("describe_instances").paginate(InstanceIds=ids):
                for reservation in page["Reservations"]:
                    for inst in reservation["Instances"]:
                        ips[inst["InstanceId"]] = str(inst.get("PrivateIpAddress") or "")
        instances = tuple(
            GroupInstance(i["InstanceId"], str(i.get("LifecycleState", "")), ips.get(i["InstanceId"], ""))
            for i in asg.get("Instances") or []
        )
        return GroupCapacity(group, int(asg["MinSize"]), int(asg["MaxSize"]), int(asg["DesiredCapacity"]), instances)

    def terminate(self, group: str, instance_ids: list[str]) -> None:
        """Terminate exactly ``instance_ids`` and lower the group's desired capacity by as many (nothing replaces
        them). Refused, with nothing terminated, when that would take the group below its MinSize."""
        now = self.capacity(group)
        members = {i.instance_id for i in now.instances}
        strangers = sorted(set(instance_ids) - members)
        if strangers:
            raise ClusterError(f"Instance(s) {strangers} are not in Auto Scaling group {group!r} (it has "
                               f"{sorted(members)}); nothing was terminated. Run the scale step again.")
        if now.desired - len(instance_ids) < now.min_size:
            raise ClusterError(
                f"Removing {len(instance_ids)} instance(s) from Auto Scaling group {group!r} takes its desired "
                f"capacity from {now.desired} to {now.desired - len(instance_ids)}, below its MinSize {now.min_size} "
                "(the node group's minSize, set by terraform); nothing was terminated. Lower the node group's "
                "min_size in the terraform stack and apply it, or keep more workers."
            )
        for instance_id in instance_ids:
            self.conn.terminate_instance_in_auto_scaling_group(InstanceId=instance_id,
                                                               ShouldDecrementDesiredCapacity=True)
            self.log.info("terminated %s in %s (desired capacity lowered by one)", instance_id, group)
