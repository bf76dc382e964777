"""Defer until ECS services run their desired number of tasks (the Ray head and worker services), or, after an
image rollout, until their deployments have settled (boto's ``services_stable``)."""

from __future__ import annotations

from abc import abstractmethod
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


class _EcsServicesWaiterTrigger(WaiterEvents, AwsBaseWaiterTrigger):
    """One ECS services wait on a botocore waiter: the subclass names the waiter (``WAITER``), what its status log
    line shows (``STATUS``, ``STATUS_QUERY``), its default pacing and its events."""

    aws_hook_class = EcsServiceHook
    WAITER: str
    STATUS: str
    STATUS_QUERY: str
    DEFAULT_DELAY_S: float
    DEFAULT_MAX_ATTEMPTS: int

    def __init__(
        self,
        cluster: str,
        services: list[str],
        *,
        waiter_delay: float | None = None,
        waiter_max_attempts: int | None = None,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict[str, Any] | None = None,
    ) -> None:
        services = sorted(services)
        super().__init__(
            serialized_fields={"cluster": cluster, "services": services},
            waiter_name=self.WAITER,
            waiter_args={"cluster": cluster, "services": services},
            failure_message=f"ECS services {services} in {cluster!r} failed",
            status_message=f"{self.STATUS} in {cluster!r}",
            status_queries=[self.STATUS_QUERY],
            return_key="cluster",
            return_value=cluster,
            # the provider sleeps any number
            waiter_delay=self.DEFAULT_DELAY_S if waiter_delay is None else waiter_delay,  # type: ignore[arg-type]
            waiter_max_attempts=self.DEFAULT_MAX_ATTEMPTS if waiter_max_attempts is None else waiter_max_attempts,
            aws_conn_id=aws_conn_id,
            region_name=region_name,
            verify=verify,
            botocore_config=botocore_config,
        )
        self.cluster = cluster
        self.services = services

    @abstractmethod
    def success_event(self, reply: dict[str, Any], region: str | None) -> dict[str, Any]:
        """The ``success`` event: what each service runs."""

    @abstractmethod
    def unsuccessful_message(self, reply: dict[str, Any], region: str | None, *, timed_out: bool) -> str:
        """The ``failed`` / ``timeout`` event's message, naming the services."""


class EcsServicesRunningTrigger(_EcsServicesWaiterTrigger):
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

    WAITER, STATUS = SERVICES_WAITER, "ECS services"
    STATUS_QUERY = "services[].[serviceName, runningCount, desiredCount, pendingCount]"
    DEFAULT_DELAY_S, DEFAULT_MAX_ATTEMPTS = 10, 90

    def success_event(self, reply: dict[str, Any], region: str | None) -> dict[str, Any]:
        shown = {
            s["serviceName"]: {"running": s["runningCount"], "desired": s["desiredCount"], "pending": s["pendingCount"]}
            for s in reply.get("services") or []
        }
        return {"status": "success", "cluster": self.cluster, "services": shown}

    def unsuccessful_message(self, reply: dict[str, Any], region: str | None, *, timed_out: bool) -> str:
        return services_wait_message(reply, self.cluster, waited_s=self.timeout_s if timed_out else None)


class EcsServicesStableTrigger(_EcsServicesWaiterTrigger):
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

    WAITER, STATUS = STABLE_WAITER, "ECS deployments"
    STATUS_QUERY = "services[].[serviceName, length(deployments), runningCount, desiredCount]"
    DEFAULT_DELAY_S, DEFAULT_MAX_ATTEMPTS = 15, 60

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
