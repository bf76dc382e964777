"""ServeApplicationsTrigger: wait on the Ray dashboard until Serve apps are RUNNING (or fail with Serve's message)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class ServeApplicationsTrigger(BaseTrigger):
    """Poll ``GET /api/serve/applications/`` asynchronously.

    An app counts only once it was (re)deployed at or after ``submitted_at``: right after a PUT the
    controller may still report the *previous* version as RUNNING, which must not pass for the new one.
    Emits one event: ``success`` (all RUNNING), ``failed`` (an app DEPLOY_FAILED/UNHEALTHY, with Serve's
    own message, or the dashboard refused the token: 401/403 are not retried) or ``timeout`` (with the
    last statuses seen).
    """

    def __init__(
        self,
        dashboard_url: str,
        app_names: list[str],
        submitted_at: float,
        timeout_s: float = 600.0,
        poll_interval_s: float = 3.0,
    ) -> None:
        super().__init__()
        self.dashboard_url = dashboard_url
        self.app_names = list(app_names)
        self.submitted_at = submitted_at
        self.timeout_s = timeout_s
        self.poll_interval_s = poll_interval_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "dashboard_url": self.dashboard_url,
                "app_names": self.app_names,
                "submitted_at": self.submitted_at,
                "timeout_s": self.timeout_s,
                "poll_interval_s": self.poll_interval_s,
            },
        )

    def evaluate(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """The event to emit for one status payload, or None to keep waiting. Pure, so it is testable."""
        apps = payload.get("applications") or {}
        statuses: dict[str, str] = {}
        for name in self.app_names:
            app = apps.get(name)
            fresh = app is not None and float(app.get("last_deployed_time_s") or 0) >= self.submitted_at - 1
            status = app.get("status") if fresh else "PENDING"
            statuses[name] = status
            if fresh and status in ("DEPLOY_FAILED", "UNHEALTHY"):
                # The app-level message is often generic ("Failed to update the deployments");
                # the deployments' own messages carry the replica's exception.
                details = [
                    f"{dep}: {info.get('message')}"
                    for dep, info in (app.get("deployments") or {}).items()
                    if info.get("message")
                ]
                message = "; ".join([app.get("message") or "no message from Serve", *details])
                return {"status": "failed", "app": name, "app_status": status, "message": message}
        if all(s == "RUNNING" for s in statuses.values()):
            return {"status": "success", "apps": statuses}
        return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from raylift.hooks.ray_dashboard import RayAuthError, RayDashboardHook

        hook = RayDashboardHook(self.dashboard_url, timeout_s=10)
        deadline = time.monotonic() + self.timeout_s
        last: dict[str, Any] = {}
        while True:
            try:
                payload = await hook.aserve_applications()
                last = hook.app_statuses(payload)
                event = self.evaluate(payload)
                if event is not None:  # seen_at: when the wait saw it (the run record's trigger→RUNNING)
                    yield TriggerEvent({**event, "seen_at": time.time()})
                    return
            except RayAuthError as exc:  # a missing or wrong token does not fix itself: fail now, not at the deadline
                yield TriggerEvent({"status": "failed", "app_status": "auth", "message": str(exc)})
                return
            except Exception as exc:  # dashboard briefly unreachable: keep waiting until the deadline
                last = {"error": f"{type(exc).__name__}: {exc}"}
            if time.monotonic() > deadline:
                yield TriggerEvent(
                    {"status": "timeout", "message": f"not RUNNING after {self.timeout_s:.0f}s", "last": last}
                )
                return
            await asyncio.sleep(self.poll_interval_s)
