"""Defer until a CodeBuild build ends; the event carries the outcome (and on failure, phase, reason, logs)."""

from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.triggers.base import AwsBaseWaiterTrigger

from raylift.hooks.codebuild import BUILD_WAITER, CodeBuildHook, build_outcome, build_wait_message
from raylift.triggers.base import WaiterEvents


class CodeBuildBuildTrigger(WaiterEvents, AwsBaseWaiterTrigger):
    """Waits on the ``build_complete`` waiter (``raylift/waiters/codebuild.json``) for ``build_id``.

    Events: ``success`` (``build_id``, ``image``, ``logs_url``); ``failed`` (``message`` naming the
    failed phase, reason and logs link, and those as ``phase``/``reason``/``logs_url``/``build_status``);
    ``timeout`` (``message`` naming the phase the build is still in).

    :param build_id: the CodeBuild build id (``project:uuid``).
    :param image: the image URI the build pushes; echoed in the success event.
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before a ``timeout`` event (throttled polls count as attempts).
    :param aws_conn_id: connection for credentials; the hook is built inside ``run()`` (other host).
    :param region_name: AWS region, or None for the connection's.
    :param verify: SSL verification, as for the hook.
    :param botocore_config: botocore client config, as for the hook.
    """

    aws_hook_class = CodeBuildHook

    def __init__(
        self,
        build_id: str,
        image: str,
        *,
        waiter_delay: float = 15,
        waiter_max_attempts: int = 240,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            serialized_fields={"build_id": build_id, "image": image},
            waiter_name=BUILD_WAITER,
            waiter_args={"ids": [build_id]},
            failure_message=f"CodeBuild build {build_id} failed",
            status_message=f"CodeBuild build {build_id}",
            status_queries=["builds[0].buildStatus", "builds[0].currentPhase"],
            return_key="build_id",
            return_value=build_id,
            waiter_delay=waiter_delay,  # type: ignore[arg-type]  # the provider sleeps any number
            waiter_max_attempts=waiter_max_attempts,
            aws_conn_id=aws_conn_id,
            region_name=region_name,
            verify=verify,
            botocore_config=botocore_config,
        )
        self.build_id = build_id
        self.image = image

    def success_event(self, reply: dict[str, Any], region: str | None) -> dict[str, Any]:
        builds = reply.get("builds") or []
        logs_url = build_outcome(builds[0], region).logs_url if builds else None
        return {"status": "success", "build_id": self.build_id, "image": self.image, "logs_url": logs_url}

    def unsuccessful_message(self, reply: dict[str, Any], region: str | None, *, timed_out: bool) -> str:
        return build_wait_message(reply, self.build_id, region, waited_s=self.timeout_s if timed_out else None)

    def failed_details(self, reply: dict[str, Any], region: str | None) -> dict[str, Any]:
        builds = reply.get("builds") or []
        if not builds:
            return {}
        outcome = build_outcome(builds[0], region)
        return {
            "build_status": outcome.status,
            "phase": outcome.failed_phase or outcome.current_phase,
            "reason": outcome.reason,
            "logs_url": outcome.logs_url,
        }
