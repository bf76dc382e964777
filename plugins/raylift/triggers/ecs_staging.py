"""Defer until the one-off ECS staging task has stopped; the event carries how it ended (exit code, reasons)."""

from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.triggers.base import AwsBaseWaiterTrigger

from raylift.hooks.ecs_staging import STAGING_WAITER, EcsStagingHook, task_outcome
from raylift.triggers.base import WaiterEvents


class EcsStagingTaskTrigger(WaiterEvents, AwsBaseWaiterTrigger):
    """Waits on the ``staging_task_stopped`` waiter (``raylift/waiters/ecs_staging.json``) for one task.

    "Stopped" is not "succeeded": the ``success`` event says the task ended and how (``exit_code``, ``stop_code``,
    ``stopped_reason``, ``container_reason``, read from the waiter's last ``DescribeTasks`` reply, no extra call);
    the operator then reads the staging record the task wrote. ``failed``: ECS no longer knows the task;
    ``timeout``: still running after ``waiter_delay`` x ``waiter_max_attempts`` (it is left running).

    :param cluster: ECS cluster name or ARN.
    :param task_arn: the staging task's ARN.
    :param container: the staging container's name (whose exit code counts).
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before a ``timeout`` event.
    :param aws_conn_id: connection for credentials; the hook is built inside ``run()`` (other host).
    :param region_name: AWS region, or None for the connection's.
    :param verify: SSL verification, as for the hook.
    :param botocore_config: botocore client config, as for the hook.
    """

    aws_hook_class = EcsStagingHook

    def __init__(
        self,
        cluster: str,
        task_arn: str,
        container: str,
        *,
        waiter_delay: float = 15,
        waiter_max_attempts: int = 480,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            serialized_fields={"cluster": cluster, "task_arn": task_arn, "container": container},
            waiter_name=STAGING_WAITER,
            waiter_args={"cluster": cluster, "tasks": [task_arn]},
            failure_message=f"ECS staging task {task_arn} failed",
            status_message=f"ECS staging task {task_arn}",
            status_queries=["tasks[0].lastStatus"],
            return_key="task_arn",
            return_value=task_arn,
            waiter_delay=waiter_delay,  # type: ignore[arg-type]  # the provider sleeps any number
            waiter_max_attempts=waiter_max_attempts,
            aws_conn_id=aws_conn_id,
            region_name=region_name,
            verify=verify,
            botocore_config=botocore_config,
        )
        self.cluster, self.task_arn, self.container = cluster, task_arn, container

    def success_event(self, reply: dict[str, Any], region: str | None) -> dict[str, Any]:
        tasks = reply.get("tasks") or [{}]
        outcome = task_outcome(tasks[0], self.container)
        return {"status": "success", "task_arn": self.task_arn, "cluster": self.cluster,
                "exit_code": outcome.exit_code, "stop_code": outcome.stop_code,
                "stopped_reason": outcome.stopped_reason, "container_reason": outcome.container_reason}

    def unsuccessful_message(self, reply: dict[str, Any], region: str | None, *, timed_out: bool) -> str:
        if timed_out:
            status = ((reply.get("tasks") or [{}])[0]).get("lastStatus", "unknown")
            return (f"ECS staging task {self.task_arn} in {self.cluster!r} still {status} after {self.timeout_s:.0f}s: "
                    "it is left running; raise the target option 'staging_timeout_s', or stop it (ecs stop-task).")
        return (f"ECS no longer knows staging task {self.task_arn} in {self.cluster!r} "
                f"({reply.get('failures') or reply.get('Error')}): stage again.")
