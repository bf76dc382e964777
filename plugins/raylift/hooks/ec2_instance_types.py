"""EC2 DescribeInstanceTypes: what an instance type has (GPUs, Neuron devices, CPU architecture), from AWS itself."""

from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

from raylift.errors import ClusterError
from raylift.serve.hardware import InstanceShape


class Ec2InstanceTypesHook(AwsBaseHook):
    """A thin EC2 hook: instance types as ``InstanceShape`` records (``raylift.serve.hardware``).

    :param aws_conn_id: the AWS connection (None: the default credential chain).
    :param region_name: the region (None: the connection's).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["client_type"] = "ec2"
        super().__init__(*args, **kwargs)

    def shapes(self, instance_types: list[str] | tuple[str, ...]) -> tuple[InstanceShape, ...]:
        """The shapes of ``instance_types``, in their order (each once); ClusterError naming an unknown type."""
        from botocore.exceptions import ClientError

        wanted = list(dict.fromkeys(instance_types))
        if not wanted:
            return ()
        found: dict[str, InstanceShape] = {}
        try:
            pages = self.conn.get_paginator("describe_instance_types").paginate(InstanceTypes=wanted)
            for page in pages:
                for info in page.get("InstanceTypes", []):
                    shape = InstanceShape.from_ec2(info)
                    found[shape.instance_type] = shape
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "InvalidInstanceType":
                raise
            raise ClusterError(
                f"EC2 does not know instance type(s) {wanted} in this region ({exc.response['Error'].get('Message')}): "
                "check the cluster's node group / capacity provider."
            ) from None
        missing = [t for t in wanted if t not in found]
        if missing:
            raise ClusterError(f"EC2 DescribeInstanceTypes returned nothing for {missing}: check the instance types.")
        return tuple(found[t] for t in wanted)
