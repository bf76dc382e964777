"""Cloud Map: find the Ray head task's address (ECS registers it under a private DNS namespace), and hold the user
endpoint on ECS: one custom instance in a raylift-owned service, registered with the serving head's IP and moved
with it (RegisterInstance of an existing instance id updates it in place: AWS Cloud Map API Reference,
RegisterInstance, "If the specified instance ID already exists, AWS Cloud Map updates it"), deregistered at a
teardown."""

from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

from raylift.errors import ClusterError


class CloudMapHook(AwsBaseHook):
    """``AwsBaseHook(client_type="servicediscovery")`` with the lookups and the endpoint registration raylift needs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["client_type"] = "servicediscovery"
        super().__init__(*args, **kwargs)

    def discover_host(self, namespace: str, service: str) -> str:
        """IPv4 of a healthy instance of ``service`` (any instance if none reports health)."""
        from botocore.exceptions import ClientError

        try:
            reply = self.conn.discover_instances(
                NamespaceName=namespace, ServiceName=service, HealthStatus="HEALTHY_OR_ELSE_ALL"
            )
        except ClientError as exc:
            raise ClusterError(
                f"Cloud Map lookup of {service!r} in {namespace!r} failed ({exc.response['Error']['Code']}): "
                "check the namespace/service options, or set 'head_address'."
            ) from None
        for instance in reply.get("Instances") or []:
            ip = (instance.get("Attributes") or {}).get("AWS_INSTANCE_IPV4")
            if ip:
                return str(ip)
        raise ClusterError(
            f"Cloud Map has no running instance of {service!r} in {namespace!r}: the Ray head task is not up. "
            "Scale the head service to 1 first."
        )

    def service_ids(self, namespace: str, service: str) -> tuple[str, str]:
        """``(id, ARN)`` of the Cloud Map service ``service`` in the namespace named ``namespace``; ClusterError
        naming what is missing (the terraform stack creates them)."""
        namespace_id = next(
            (n["Id"] for page in self.conn.get_paginator("list_namespaces").paginate() for n in page["Namespaces"]
             if n.get("Name") == namespace),
            None,
        )  # fmt: skip
        if namespace_id is None:
            raise ClusterError(f"Cloud Map has no namespace {namespace!r}: check the target option 'cloud_map_namespace'.")
        pages = self.conn.get_paginator("list_services").paginate(
            Filters=[{"Name": "NAMESPACE_ID", "Values": [namespace_id], "Condition": "EQ"}]
        )
        for page in pages:
            for found in page["Services"]:
                in_namespace = (found.get("DnsConfig") or {}).get("NamespaceId", namespace_id) == namespace_id
                if found.get("Name") == service and in_namespace:
                    return str(found["Id"]), str(found["Arn"])
        raise ClusterError(
            f"Cloud Map namespace {namespace!r} has no service {service!r}: the terraform module ecs_ray creates it "
            "(apply it with blue/green enabled), or check the target options."
        )

    def register_endpoint(self, service_id: str, instance_id: str, ip: str, port: int) -> str:
        """Point the custom instance ``instance_id`` of ``service_id`` at ``ip:port`` (created, or updated in place
        when it exists): the endpoint's DNS name answers that address from then on. Returns the operation id."""
        reply = self.conn.register_instance(
            ServiceId=service_id,
            InstanceId=instance_id,
            Attributes={"AWS_INSTANCE_IPV4": ip, "AWS_INSTANCE_PORT": str(port)},
        )
        self.log.info("Cloud Map service %s: instance %s now at %s:%d", service_id, instance_id, ip, port)
        return str(reply.get("OperationId", ""))

    def registered_ip(self, namespace: str, service: str, instance_id: str) -> str | None:
        """The IPv4 the instance ``instance_id`` of ``service`` answers with now (DiscoverInstances), or None when
        it is not registered. Where a service lists an instance id more than once (moto 5.2's RegisterInstance appends
        a registration where AWS updates the one it has), the last one: the registration AWS would hold."""
        from botocore.exceptions import ClientError

        try:
            reply = self.conn.discover_instances(NamespaceName=namespace, ServiceName=service, HealthStatus="ALL")
        except ClientError as exc:
            raise ClusterError(
                f"Cloud Map lookup of {service!r} in {namespace!r} failed ({exc.response['Error']['Code']}): "
                "check the target options cloud_map_namespace and endpoint_cloud_map_service."
            ) from None
        ips = [(i.get("Attributes") or {}).get("AWS_INSTANCE_IPV4") for i in reply.get("Instances") or []
               if i.get("InstanceId") == instance_id]
        return str(ips[-1]) if ips and ips[-1] else None

    def deregister_endpoint(self, service_id: str, instance_id: str) -> bool:
        """Remove the custom instance ``instance_id`` of ``service_id`` (its DNS record goes with it); False when it
        was not registered."""
        from botocore.exceptions import ClientError

        try:
            self.conn.deregister_instance(ServiceId=service_id, InstanceId=instance_id)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "InstanceNotFound":
                return False
            raise
        self.log.info("Cloud Map service %s: instance %s deregistered", service_id, instance_id)
        return True
