"""ECS services as Ray head and workers: resize them, and read how many tasks run.

A service with an Application Auto Scaling target is resized through its min/max capacity (setting
``desiredCount`` behind the autoscaler's back would be undone); others through ``desiredCount``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from airflow.providers.amazon.aws.hooks.ecs import EcsHook

from raylift.errors import ClusterError

WAITERS = Path(__file__).resolve().parents[1] / "waiters" / "ecs_service.json"


@dataclass(frozen=True)
class ServiceCounts:
    name: str
    desired: int
    running: int
    pending: int
    status: str

    def reached(self, want: int) -> bool:
        """All wanted tasks run and none is still starting (for 0: none runs)."""
        return self.running >= want and self.pending == 0 and (want > 0 or self.running == 0)


def resource_id(cluster: str, service: str) -> str:
    return f"service/{cluster}/{service}"


class EcsServiceHook(EcsHook):
    """The provider's ``EcsHook`` with service scaling; custom waiters in ``raylift/waiters/ecs_service.json``."""

    @property
    def waiter_path(self) -> Path:  # type: ignore[override]
        return WAITERS

    def _autoscaling(self) -> AwsBaseHook:
        return AwsBaseHook(
            aws_conn_id=self.aws_conn_id, region_name=self.region_name, client_type="application-autoscaling"
        )

    def service_counts(self, cluster: str, services: list[str]) -> dict[str, ServiceCounts]:
        """Desired/running/pending per service; ClusterError naming any that do not exist."""
        reply = self.conn.describe_services(cluster=cluster, services=services)
        if reply.get("failures"):
            missing = ", ".join(f"{f.get('arn', '?').split('/')[-1]} ({f.get('reason')})" for f in reply["failures"])
            raise ClusterError(f"ECS cluster {cluster!r} has no service(s) {missing}: check the target options.")
        return {
            s["serviceName"]: ServiceCounts(
                s["serviceName"], s["desiredCount"], s["runningCount"], s.get("pendingCount", 0), s.get("status", "")
            )
            for s in reply["services"]
        }

    def scalable_target(self, cluster: str, service: str) -> dict[str, Any] | None:
        reply = self._autoscaling().conn.describe_scalable_targets(
            ServiceNamespace="ecs",
            ResourceIds=[resource_id(cluster, service)],
            ScalableDimension="ecs:service:DesiredCount",
        )
        targets = reply.get("ScalableTargets") or []
        return targets[0] if targets else None

    def scale_service(self, cluster: str, service: str, count: int) -> str:
        """Resize ``service`` to ``count`` tasks; returns how ("autoscaling" or "desired_count")."""
        if count < 0:
            raise ClusterError(f"Cannot scale ECS service {service!r} to {count} tasks.")
        target = self.scalable_target(cluster, service)
        if target is not None:
            high = max(count, int(target["MaxCapacity"])) if count > 0 else 0
            self._autoscaling().conn.register_scalable_target(
                ServiceNamespace="ecs",
                ResourceId=resource_id(cluster, service),
                ScalableDimension="ecs:service:DesiredCount",
                MinCapacity=count,
                MaxCapacity=high,
            )
            self.log.info("ECS service %s/%s: autoscaling capacity now %d..%d", cluster, service, count, high)
            return "autoscaling"
        self.conn.update_service(cluster=cluster, service=service, desiredCount=count)
        self.log.info("ECS service %s/%s: desiredCount %d", cluster, service, count)
        return "desired_count"

    def wait_for_services(
        self, cluster: str, services: list[str], *, delay_s: int = 15, max_attempts: int = 40
    ) -> None:
        """Block (in-process) until every service runs its desired count; the deferrable path is the trigger."""
        from botocore.exceptions import WaiterError

        try:
            self.get_waiter("services_at_desired_count").wait(
                cluster=cluster, services=services, WaiterConfig={"Delay": delay_s, "MaxAttempts": max_attempts}
            )
        except WaiterError as exc:
            counts = self.service_counts(cluster, services)
            shown = ", ".join(f"{c.name} {c.running}/{c.desired} running" for c in counts.values())
            raise ClusterError(f"ECS services in {cluster!r} did not reach their desired count: {shown} ({exc}).") from None
