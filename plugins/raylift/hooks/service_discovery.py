"""Cloud Map: find the Ray head task's address (ECS registers it under a private DNS namespace)."""

from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

from raylift.errors import ClusterError


class CloudMapHook(AwsBaseHook):
    """``AwsBaseHook(client_type="servicediscovery")`` with the one lookup raylift needs."""

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
                return ip
        raise ClusterError(
            f"Cloud Map has no running instance of {service!r} in {namespace!r}: the Ray head task is not up. "
            "Scale the head service to 1 first."
        )
