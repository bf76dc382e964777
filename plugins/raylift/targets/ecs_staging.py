"""Model staging on the ``ecs`` target: a one-off ECS task copies the model, beside the cluster.

The task runs the staging task definition terraform creates (``terraform/modules/ecs_ray/staging.tf``: Fargate,
200 GiB ephemeral storage, a task role that may write the model bucket), placed like the head service, with its
container's command overridden by the request's (``python -m raylift.aws.staging_job``, arguments only). Why off
the worker, and what ``AwsTarget`` does around it (the request, reading the record): ``raylift.targets.staging_request``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raylift.aws.staging_job import StagingLaunch, StagingRequest
from raylift.triggers.base import attempts_for

if TYPE_CHECKING:
    from raylift.hooks.ecs_staging import EcsStagingHook
    from raylift.targets.aws import AwsOptions
    from raylift.triggers.ecs_staging import EcsStagingTaskTrigger


class EcsStaging:
    """Mixin for ``EcsTarget``: the remote-staging steps ``AwsTarget.start_staging`` / ``finish_staging`` call."""

    # -- what the host supplies (``EcsTarget``) ----------------------------------------------------------------
    aws: AwsOptions
    cluster: str  # the ECS cluster the task runs in

    if TYPE_CHECKING:

        @property
        def head_service(self) -> str: ...  # the service whose network placement the task takes

    def _staging_hook(self) -> EcsStagingHook:
        from raylift.hooks.ecs_staging import EcsStagingHook

        return EcsStagingHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)

    # -- the staging steps -----------------------------------------------------------------------------------
    def launch_staging(self, request: StagingRequest) -> StagingLaunch:
        """Run the staging task in the cluster; the launch carries its ARN."""
        cluster, head_service = self.cluster, self.head_service
        arn = self._staging_hook().run_staging_task(
            cluster=cluster, task_definition=self.aws.staging_task_definition, container=self.aws.staging_container,
            command=request.command(), head_service=head_service,
            tags={"raylift:model": request.model_id[:256], "raylift:record": request.record_key[:256]},
        )
        return StagingLaunch(request, "ecs", arn, {"cluster": cluster, "container": self.aws.staging_container})

    def staging_trigger(self, launch: StagingLaunch) -> EcsStagingTaskTrigger:
        """The trigger that fires when the task has stopped."""
        from raylift.triggers.ecs_staging import EcsStagingTaskTrigger

        opts = self.aws
        return EcsStagingTaskTrigger(
            launch.details["cluster"], launch.handle, launch.details["container"],
            waiter_delay=opts.staging_poll_interval_s,
            waiter_max_attempts=attempts_for(opts.staging_timeout_s, opts.staging_poll_interval_s),
            aws_conn_id=opts.aws_conn_id, region_name=opts.region_name,
        )

    def wait_for_staging(self, launch: StagingLaunch) -> dict[str, Any]:
        """The trigger's wait (boto's waiter), blocking here; returns an event of the trigger's shape."""
        from botocore.exceptions import WaiterError

        from raylift.hooks.ecs_staging import task_outcome

        hook, cluster, container = self._staging_hook(), launch.details["cluster"], launch.details["container"]
        opts = self.aws
        try:
            hook.wait_for_staging_task(cluster, launch.handle, waiter_delay=opts.staging_poll_interval_s,
                                       waiter_max_attempts=attempts_for(opts.staging_timeout_s,
                                                                        opts.staging_poll_interval_s))
        except WaiterError as exc:
            status = "timeout" if "Max attempts exceeded" in str(exc) else "failed"
            return {"status": status, "task_arn": launch.handle,
                    "message": f"ECS staging task {launch.handle} in {cluster!r}: {exc}"}
        outcome = task_outcome(hook.describe_task(cluster, launch.handle), container)
        return {"status": "success", "task_arn": launch.handle, "exit_code": outcome.exit_code,
                "stop_code": outcome.stop_code, "stopped_reason": outcome.stopped_reason,
                "container_reason": outcome.container_reason}

    def staging_where(self, launch: StagingLaunch) -> str:
        """The task, and where its logs are, for messages."""
        return (f"ECS staging task {launch.handle} (its logs: the staging task definition's log group, "
                "/ecs/<name>-staging)")
