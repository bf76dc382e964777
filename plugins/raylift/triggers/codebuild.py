"""Defer until a CodeBuild build ends; the event carries the outcome (and on failure, phase, reason, logs)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class CodeBuildBuildTrigger(BaseTrigger):
    """Polls ``BatchGetBuilds`` for ``build_id`` until it is terminal or ``timeout_s`` passes.

    :param build_id: the CodeBuild build id (``project:uuid``).
    :param image: the image URI the build pushes; echoed in the success event.
    :param aws_conn_id: connection for credentials; a hook is built inside ``run()`` (other host).
    :param region_name: AWS region, or None for the connection's.
    :param poll_interval_s: seconds between polls.
    :param timeout_s: give up (error event) after this many seconds.
    """

    def __init__(
        self,
        build_id: str,
        image: str,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        poll_interval_s: float = 15.0,
        timeout_s: float = 3600.0,
    ) -> None:
        super().__init__()
        self.build_id = build_id
        self.image = image
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.poll_interval_s = poll_interval_s
        self.timeout_s = timeout_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "build_id": self.build_id,
                "image": self.image,
                "aws_conn_id": self.aws_conn_id,
                "region_name": self.region_name,
                "poll_interval_s": self.poll_interval_s,
                "timeout_s": self.timeout_s,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from raylift.aws.aio import call
        from raylift.hooks.codebuild import CodeBuildHook, build_outcome

        hook = CodeBuildHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        deadline = time.monotonic() + self.timeout_s
        phase = "?"
        while True:
            try:
                reply = await call(hook, "batch_get_builds", ids=[self.build_id])
            except Exception as exc:  # one event, whatever went wrong
                yield TriggerEvent({"status": "error", "build_id": self.build_id, "message": f"BatchGetBuilds failed: {exc}"})
                return
            builds = reply.get("builds") or []
            if not builds:
                yield TriggerEvent(
                    {"status": "error", "build_id": self.build_id, "message": f"CodeBuild has no build {self.build_id!r}."}
                )
                return
            region = self.region_name or hook.conn_region_name
            outcome = build_outcome(builds[0], region)
            phase = outcome.current_phase
            if outcome.succeeded:
                yield TriggerEvent(
                    {"status": "success", "build_id": self.build_id, "image": self.image, "logs_url": outcome.logs_url}
                )
                return
            if outcome.done:
                yield TriggerEvent(
                    {
                        "status": "error",
                        "build_id": self.build_id,
                        "build_status": outcome.status,
                        "phase": outcome.failed_phase or outcome.current_phase,
                        "reason": outcome.reason,
                        "logs_url": outcome.logs_url,
                        "message": outcome.failure_message(),
                    }
                )
                return
            if time.monotonic() + self.poll_interval_s > deadline:
                yield TriggerEvent(
                    {
                        "status": "timeout",
                        "build_id": self.build_id,
                        "message": f"CodeBuild build {self.build_id} still in phase {phase} after {self.timeout_s:.0f}s.",
                    }
                )
                return
            self.log.info("CodeBuild build %s: %s (phase %s)", self.build_id, outcome.status, phase)
            await asyncio.sleep(self.poll_interval_s)
