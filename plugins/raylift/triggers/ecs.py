"""Defer until ECS services run their desired number of tasks (the Ray head and worker services), or, after an
image rollout, until their deployments have settled (boto's ``services_stable``)."""

from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.triggers.base import AwsBaseWaiterTrigger

from raylift.hooks.ecs_service import (
    SERVICES_WAITER,
    STABLE_WAITER,
    EcsServiceHook,
    services_wait_message,
    stable_wait_message,
)
from raylift.triggers.base import WaiterEvents


class EcsServicesRunningTrigger(WaiterEvents, AwsBaseWaiterTrigger):
    """Waits on the ``services_at_desired_count`` waiter (``raylift/waiters/ecs.json``): every service runs
    its desired count, none pending. The scale step set the desired counts; whether Ray sees the nodes is
    asked afterwards (``RayClusterReadySensor``), so an autoscaler that has not yet raised a desired count
    only moves the wait to that second stage.

    Events: ``success`` (``services``: name -> running/desired/pending); ``failed`` (``message`` naming
    missing or INACTIVE services); ``timeout`` (``message`` naming the lagging services).

    :param cluster: ECS cluster name or ARN.
    :param services: the service names to wait for.
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before a ``timeout`` event (throttled polls count as attempts).
    :param aws_conn_id: connection for credentials; the hook is built inside ``run()``.
    :param region_name: AWS region, or None for the connection's.
    :param verify: SSL verification, as for the hook.
    :param botocore_config: botocore client config, as for the hook.
    """

    aws_hook_class = EcsServiceHook

    def __init__(
        self,
        cluster: str,
        services: list[str],
        *,
        waiter_delay: float = 10,
        waiter_max_attempts: int = 90,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict[str, Any] | None = None,
    ) -> None:
        services = sorted(services)
        super().__init__(
            serialized_fields={"cluster": cluster, "services": services},
            waiter_name=SERVICES_WAITER,
            waiter_args={"cluster": cluster, "services": services},
            failure_message=f"ECS services {services} in {cluster!r} failed",
            status_message=f"ECS services in {cluster!r}",
            status_queries=["services[].[serviceName, runningCount, desiredCount, pendingCount]"],
            return_key="cluster",
            return_value=cluster,
            waiter_delay=waiter_delay,  # type: ignore[arg-type]  # the provider sleeps any number
            waiter_max_attempts=waiter_max_attempts,
            aws_conn_id=aws_conn_id,
            region_name=region_name,
            verify=verify,
            botocore_config=botocore_config,
        )
        self.cluster = cluster
        self.services = services

    def success_event(self, reply: dict[str, Any], region: str | None) -> dict[str, Any]:
        shown = {
            s["serviceName"]: {"running": s["runningCount"], "desired": s["desiredCount"], "pending": s["pendingCount"]}
            for s in reply.get("services") or []
        }
        return {"status": "success", "cluster": self.cluster, "services": shown}

    def unsuccessful_message(self, reply: dict[str, Any], region: str | None, *, timed_out: bool) -> str:
        return services_wait_message(reply, self.cluster, waited_s=self.timeout_s if timed_out else None)


class EcsServicesStableTrigger(WaiterEvents, AwsBaseWaiterTrigger):
    """Waits on boto's own ``services_stable`` waiter (through the provider's ``get_waiter``, which falls back to
    the client's waiters): each service has one deployment left and runs its desired count. After an image
    rollout the old deployment lingers until its tasks are replaced, so this is the condition "every task runs
    the new revision". A deleted or missing service fails the wait; no retry on throttling (boto's waiter has none).

    Events: ``success`` (``services``: name -> running/desired/deployments); ``failed`` (``message`` naming
    missing or deleted services); ``timeout`` (``message`` naming the services still deploying).

    :param cluster: ECS cluster name or ARN.
    :param services: the service names to wait for.
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before a ``timeout`` event.
    :param aws_conn_id: connection for credentials; the hook is built inside ``run()``.
    :param region_name: AWS region, or None for the connection's.
    :param verify: SSL verification, as for the hook.
    :param botocore_config: botocore client config, as for the hook.
    """

    aws_hook_class = EcsServiceHook

    def __init__(
        self,
        cluster: str,
        services: list[str],
        *,
        waiter_delay: float = 15,
        waiter_max_attempts: int = 60,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict[str, Any] | None = None,
    ) -> None:
        services = sorted(services)
        super().__init__(
            serialized_fields={"cluster": cluster, "services": services},
            waiter_name=STABLE_WAITER,
            waiter_args={"cluster": cluster, "services": services},
            failure_message=f"ECS services {services} in {cluster!r} failed",
            status_message=f"ECS deployments in {cluster!r}",
            status_queries=["services[].[serviceName, length(deployments), runningCount, desiredCount]"],
            return_key="cluster",
            return_value=cluster,
            waiter_delay=waiter_delay,  # type: ignore[arg-type]  # the provider sleeps any number
            waiter_max_attempts=waiter_max_attempts,
            aws_conn_id=aws_conn_id,
            region_name=region_name,
            verify=verify,
            botocore_config=botocore_config,
        )
        self.cluster = cluster
        self.services = services

    def success_event(self, reply: dict[str, Any], region: str | None) -> dict[str, Any]:
        shown = {
            s["serviceName"]: {
                "running": s["runningCount"],
                "desired": s["desiredCount"],
                "deployments": len(s.get("deployments") or []),
                "task_definition": s.get("taskDefinition"),
            }
            for s in reply.get("services") or []
        }
        return {"status": "success", "cluster": self.cluster, "services": shown}

    def unsuccessful_message(self, reply: dict[str, Any], region: str | None, *, timed_out: bool) -> str:
        return stable_wait_message(reply, self.cluster, waited_s=self.timeout_s if timed_out else None)
