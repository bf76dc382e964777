"""A one-off ECS task that stages a model (RunTask of the staging task definition terraform creates), and how it ended.

Where it runs is read from ECS, not configured twice: the launch type from the task definition's
``requiresCompatibilities`` (terraform's staging task definition is Fargate: up to 200 GiB of ephemeral storage,
no GPU instance taken), and for ``awsvpc`` tasks the subnets and security groups of the Ray head service, so the
copy leaves from the same network as the cluster that will load it. "It has stopped" is the custom waiter
``staging_task_stopped`` in ``raylift/waiters/ecs_staging.json`` (boto's ``tasks_stopped`` plus a failure on a
MISSING task and retries on throttling), which the in-process wait and ``EcsStagingTaskTrigger`` both drive.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow.providers.amazon.aws.hooks.ecs import EcsHook

from raylift.errors import StagingError

WAITERS = Path(__file__).resolve().parents[1] / "waiters"
STAGING_WAITER = "staging_task_stopped"
STARTED_BY = "raylift-staging"  # RunTask's startedBy (36 characters at most): ListTasks can find them


@dataclass(frozen=True)
class TaskOutcome:
    """How a stopped staging task ended: its container's exit code (None when ECS never ran it, or does not say),
    ECS's stop code and reason, and the container's own reason (e.g. an image pull failure)."""

    exit_code: int | None
    stop_code: str
    stopped_reason: str
    container_reason: str

    def describe(self) -> str:
        parts = [f"exit code {self.exit_code}" if self.exit_code is not None else "no exit code"]
        parts += [p for p in (self.stop_code, self.stopped_reason, self.container_reason) if p]
        return ", ".join(parts)


def task_outcome(task: dict[str, Any], container: str) -> TaskOutcome:
    """The outcome of one ``DescribeTasks`` task, reading ``container``'s exit code."""
    found: dict[str, Any] = next((c for c in task.get("containers") or [] if c.get("name") == container), {})
    code = found.get("exitCode")
    return TaskOutcome(
        exit_code=int(code) if code is not None else None,
        stop_code=str(task.get("stopCode") or ""),
        stopped_reason=str(task.get("stoppedReason") or ""),
        container_reason=str(found.get("reason") or ""),
    )


def run_task_kwargs(
    *,
    cluster: str,
    task_definition: dict[str, Any],
    container: str,
    command: list[str],
    head_service: dict[str, Any] | None,
    tags: dict[str, str],
) -> dict[str, Any]:
    """RunTask's arguments for ``task_definition`` (a ``DescribeTaskDefinition`` ``taskDefinition``): the command
    as a container override (no environment override: nothing secret travels), the launch type and network the
    task definition and the head service (a ``DescribeServices`` service) call for. Pure, so it is testable."""
    names = [c.get("name") for c in task_definition.get("containerDefinitions") or []]
    if container not in names:
        raise StagingError(
            f"ECS task definition {task_definition.get('taskDefinitionArn')} has no container {container!r} (it has "
            f"{names}): set the target option 'staging_container', or apply terraform's staging.tf."
        )
    kwargs: dict[str, Any] = {
        "cluster": cluster,
        "taskDefinition": task_definition["taskDefinitionArn"],
        "count": 1,
        "startedBy": STARTED_BY,
        "overrides": {"containerOverrides": [{"name": container, "command": list(command)}]},
        "tags": [{"key": k, "value": v} for k, v in sorted(tags.items())],
        "propagateTags": "TASK_DEFINITION",
    }
    if "FARGATE" in (task_definition.get("requiresCompatibilities") or []):
        kwargs["launchType"] = "FARGATE"
    if task_definition.get("networkMode") == "awsvpc":
        network = ((head_service or {}).get("networkConfiguration") or {}).get("awsvpcConfiguration")
        if not network:
            raise StagingError(
                f"ECS task definition {task_definition['taskDefinitionArn']} uses awsvpc networking, and the Ray "
                f"head service {(head_service or {}).get('serviceName')!r} in {cluster!r} has no awsvpc "
                "configuration to borrow subnets and security groups from: check the target's 'head_service'."
            )
        kwargs["networkConfiguration"] = {"awsvpcConfiguration": {
            "subnets": list(network.get("subnets") or []),
            "securityGroups": list(network.get("securityGroups") or []),
            "assignPublicIp": network.get("assignPublicIp") or "DISABLED",
        }}
    return kwargs


class EcsStagingHook(EcsHook):
    """The provider's ``EcsHook`` with the staging task's launch and the ``staging_task_stopped`` waiter."""

    @property
    def waiter_path(self) -> Path:
        """raylift's ``waiters/ecs_staging.json``: the provider's own lookup only searches its package."""
        return WAITERS / "ecs_staging.json"

    def run_staging_task(
        self, *, cluster: str, task_definition: str, container: str, command: list[str], head_service: str,
        tags: dict[str, str],
    ) -> str:
        """RunTask the staging task definition with ``command``; returns the task ARN. StagingError naming what to
        fix when the task definition is missing or ECS places no task (capacity, a bad subnet)."""
        from botocore.exceptions import ClientError

        try:
            definition = self.conn.describe_task_definition(taskDefinition=task_definition)["taskDefinition"]
        except ClientError as exc:
            raise StagingError(
                f"ECS has no staging task definition {task_definition!r} ({exc.response['Error'].get('Message')}): "
                "apply terraform/modules/ecs_ray (staging.tf creates it) and set the target option "
                "'staging_task_definition' to its output, or set 'staging' to 'in_worker'."
            ) from None
        service = None
        if definition.get("networkMode") == "awsvpc":
            services = self.conn.describe_services(cluster=cluster, services=[head_service]).get("services") or []
            service = services[0] if services else {"serviceName": head_service}
        kwargs = run_task_kwargs(cluster=cluster, task_definition=definition, container=container, command=command,
                                 head_service=service, tags=tags)
        reply = self.conn.run_task(**kwargs)
        tasks = reply.get("tasks") or []
        if not tasks:
            failures = "; ".join(f"{f.get('arn', '')} {f.get('reason', '')} {f.get('detail', '')}".strip()
                                 for f in reply.get("failures") or [])
            raise StagingError(
                f"ECS placed no staging task in {cluster!r} ({failures or 'no reason given'}): check the cluster's "
                "capacity (Fargate in its subnets) and the staging task definition."
            )
        arn: str = tasks[0]["taskArn"]
        return arn

    def describe_task(self, cluster: str, task_arn: str) -> dict[str, Any]:
        """The task as ``DescribeTasks`` sees it (StagingError when ECS no longer knows it)."""
        reply = self.conn.describe_tasks(cluster=cluster, tasks=[task_arn])
        tasks = reply.get("tasks") or []
        if not tasks:
            raise StagingError(f"ECS does not know staging task {task_arn} in {cluster!r} any more.")
        task: dict[str, Any] = tasks[0]
        return task

    def wait_for_staging_task(self, cluster: str, task_arn: str, *, waiter_delay: float,
                              waiter_max_attempts: int) -> None:
        """Block until the task stops (the trigger's waiter, polled in-process)."""
        self.get_waiter(STAGING_WAITER).wait(
            cluster=cluster, tasks=[task_arn],
            WaiterConfig={"Delay": int(waiter_delay), "MaxAttempts": waiter_max_attempts},
        )
