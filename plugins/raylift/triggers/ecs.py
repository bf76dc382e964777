"""Defer until ECS services run the wanted number of tasks (the Ray head and worker services)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class EcsServicesRunningTrigger(BaseTrigger):
    """Polls ``DescribeServices`` until each service in ``want`` runs at least that many tasks.

    :param cluster: ECS cluster name or ARN.
    :param want: service name -> task count to wait for (0 waits for none running).
    :param aws_conn_id: connection for credentials; the hook is built inside ``run()``.
    :param region_name: AWS region, or None for the connection's.
    :param poll_interval_s: seconds between polls.
    :param timeout_s: give up (timeout event naming the counts) after this many seconds.
    """

    def __init__(
        self,
        cluster: str,
        want: dict[str, int],
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        poll_interval_s: float = 10.0,
        timeout_s: float = 900.0,
    ) -> None:
        super().__init__()
        self.cluster = cluster
        self.want = dict(want)
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.poll_interval_s = poll_interval_s
        self.timeout_s = timeout_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "cluster": self.cluster,
                "want": self.want,
                "aws_conn_id": self.aws_conn_id,
                "region_name": self.region_name,
                "poll_interval_s": self.poll_interval_s,
                "timeout_s": self.timeout_s,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from raylift.aws.aio import call
        from raylift.hooks.ecs_service import EcsServiceHook, ServiceCounts

        hook = EcsServiceHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                reply = await call(hook, "describe_services", cluster=self.cluster, services=sorted(self.want))
            except Exception as exc:
                yield TriggerEvent({"status": "error", "message": f"DescribeServices on {self.cluster!r} failed: {exc}"})
                return
            if reply.get("failures"):
                names = [f.get("arn", "?").split("/")[-1] for f in reply["failures"]]
                yield TriggerEvent(
                    {"status": "error", "message": f"ECS cluster {self.cluster!r} has no service(s) {names}."}
                )
                return
            counts = {
                s["serviceName"]: ServiceCounts(
                    s["serviceName"], s["desiredCount"], s["runningCount"], s.get("pendingCount", 0), s.get("status", "")
                )
                for s in reply["services"]
            }
            shown = {n: {"running": c.running, "desired": c.desired, "pending": c.pending} for n, c in counts.items()}
            if all(counts[name].reached(n) for name, n in self.want.items()):
                yield TriggerEvent({"status": "success", "cluster": self.cluster, "services": shown})
                return
            if time.monotonic() + self.poll_interval_s > deadline:
                lagging = ", ".join(
                    f"{n} {counts[n].running}/{w} running ({counts[n].pending} pending)"
                    for n, w in sorted(self.want.items())
                    if not counts[n].reached(w)
                )
                yield TriggerEvent(
                    {
                        "status": "timeout",
                        "cluster": self.cluster,
                        "services": shown,
                        "message": f"ECS services in {self.cluster!r} not running after {self.timeout_s:.0f}s: {lagging}. "
                        "Check capacity providers/instances and the service events.",
                    }
                )
                return
            await asyncio.sleep(self.poll_interval_s)
