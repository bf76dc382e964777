"""Serve waits on the Ray dashboard: ``ServeApplicationsTrigger`` until apps are RUNNING (or fail with Serve's
message), ``ServeApplicationGoneTrigger`` until a removed app is no longer listed.

Used by every target that talks to a Ray dashboard (local, ecs, ray). The loop, the retry rule and the event
words are ``raylift.triggers.polling.PollingTrigger``'s; this module only reads the dashboard and judges a payload.
"""

from __future__ import annotations

from typing import Any

from raylift.serve.status import FAILED_APP_STATES, ApplicationStatus
from raylift.triggers.dashboard import RayDashboardTrigger

PENDING = "PENDING"  # raylift's word for "not (re)deployed since submitted_at yet": not one of Serve's states


# Serve's controller sets this on a deployment whose replicas Ray has not placed for 30 s (SLOW_STARTUP_WARNING_S,
# ray.serve._private.deployment_state: "... replicas that have taken more than 30s to be scheduled ...").
UNSCHEDULED_MARK = "to be scheduled"
UNSCHEDULED = "UNSCHEDULED"


class ServeApplicationsTrigger(RayDashboardTrigger):
    """Poll ``GET /api/serve/applications/`` until every app in ``app_names`` is RUNNING.

    An app counts only once it was (re)deployed at or after ``submitted_at``: right after a PUT the
    controller may still report the *previous* version as RUNNING, which must not pass for the new one.
    Emits one event: ``success`` (all RUNNING, ``apps``), ``failed`` (an app DEPLOY_FAILED/UNHEALTHY, with
    Serve's own message and the deployments', or the dashboard refused the token) or ``timeout`` (with the
    last statuses seen, or the last error).

    :param dashboard_url: the dashboard, ``http://host:8265``.
    :param app_names: the Serve applications that must all be RUNNING.
    :param submitted_at: epoch seconds of the config write this wait is for.
    :param timeout_s: seconds until the ``timeout`` event.
    :param unscheduled_fails: also end with ``failed`` (``app_status`` ``UNSCHEDULED``) when Serve's controller
        reports one of the apps' replicas could not be scheduled (its "taken more than 30s to be scheduled"
        message: Ray has no room for it), for an app the release can do without (the canary's fresh baseline).
    :param poll_interval_s: seconds between polls. 1 s: the poll that sees RUNNING is the run's RUNNING time
        (``seen_at``), so a 3 s poll added 1.5 s on average to every deploy; one read of the applications a second
        costs ~0.04 of a core here (measured on `local`: 0.15 cores busy idle, 0.20 while polling).
    """

    def __init__(
        self,
        dashboard_url: str,
        app_names: list[str],
        submitted_at: float,
        timeout_s: float = 600.0,
        poll_interval_s: float = 1.0,
        cluster_conn_id: str | None = None,
        local_token: bool = False,
        unscheduled_fails: bool = False,
    ) -> None:
        super().__init__(dashboard_url, timeout_s=timeout_s, poll_interval_s=poll_interval_s,
                         cluster_conn_id=cluster_conn_id, local_token=local_token)
        self.app_names = list(app_names)
        self.submitted_at = submitted_at
        self.unscheduled_fails = unscheduled_fails

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "dashboard_url": self.dashboard_url,
                "app_names": self.app_names,
                "submitted_at": self.submitted_at,
                "timeout_s": self.timeout_s,
                "poll_interval_s": self.poll_interval_s,
                "unscheduled_fails": self.unscheduled_fails,
                **self.auth_kwargs(),
            },
        )

    @property
    def subject(self) -> str:
        return f"Serve apps {self.app_names} at {self.dashboard_url}"

    def poll(self) -> dict[str, Any]:
        return self._dashboard().poll_serve_applications()

    async def apoll(self) -> dict[str, Any]:
        return await self._dashboard().aserve_applications()

    def statuses(self, payload: dict[str, Any]) -> dict[str, str]:
        """``{app: Serve's status}`` for ``app_names``; PENDING while an app still shows its previous version."""
        apps = payload.get("applications") or {}
        out: dict[str, str] = {}
        for name in self.app_names:
            app = apps.get(name)
            if app is not None and float(app.get("last_deployed_time_s") or 0) >= self.submitted_at - 1:
                out[name] = str(app.get("status"))
            else:
                out[name] = PENDING
        return out

    def evaluate(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """The event to emit for one status payload, or None to keep waiting. Pure, so it is testable."""
        statuses = self.statuses(payload)
        for name, status in statuses.items():
            if status in FAILED_APP_STATES:
                app = (payload.get("applications") or {})[name]
                # The app-level message is often generic ("Failed to update the deployments");
                # the deployments' own messages carry the replica's exception.
                details = [
                    f"{dep}: {info.get('message')}"
                    for dep, info in (app.get("deployments") or {}).items()
                    if info.get("message")
                ]
                message = "; ".join([app.get("message") or "no message from Serve", *details])
                return {"status": "failed", "app": name, "app_status": status, "message": message}
        if all(s == ApplicationStatus.RUNNING for s in statuses.values()):
            return {"status": "success", "apps": statuses}
        if self.unscheduled_fails:
            for name, status in statuses.items():
                app = (payload.get("applications") or {}).get(name) or {}
                unscheduled = [f"{dep}: {info.get('message')}" for dep, info in (app.get("deployments") or {}).items()
                               if UNSCHEDULED_MARK in str(info.get("message") or "")]
                if status != ApplicationStatus.RUNNING and unscheduled:
                    return {"status": "failed", "app": name, "app_status": UNSCHEDULED, "message": "; ".join(unscheduled)}
        return None

    def progress(self, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        statuses = self.statuses(payload)
        return ", ".join(f"{app}={status}" for app, status in statuses.items()), {"apps": statuses}


class ServeApplicationGoneTrigger(RayDashboardTrigger):
    """Poll ``GET /api/serve/applications/`` until Serve no longer lists ``app_names`` (one app, after a config
    write that removed it: Serve shows it DELETING while its replicas drain). Emits ``success`` once it is gone,
    or ``timeout`` with the status it still had; the same dashboard reads and retry rule as the deploy wait.

    :param dashboard_url: the dashboard, ``http://host:8265``.
    :param app_names: the removed Serve application(s).
    :param timeout_s: seconds until the ``timeout`` event.
    :param poll_interval_s: seconds between polls.
    """

    def __init__(self, dashboard_url: str, app_names: list[str], timeout_s: float = 300.0,
                 poll_interval_s: float = 1.0, cluster_conn_id: str | None = None, local_token: bool = False) -> None:
        super().__init__(dashboard_url, timeout_s=timeout_s, poll_interval_s=poll_interval_s,
                         cluster_conn_id=cluster_conn_id, local_token=local_token)
        self.app_names = list(app_names)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"dashboard_url": self.dashboard_url, "app_names": self.app_names, "timeout_s": self.timeout_s,
             "poll_interval_s": self.poll_interval_s, **self.auth_kwargs()},
        )

    @property
    def subject(self) -> str:
        return f"removal of Serve apps {self.app_names} at {self.dashboard_url}"

    def poll(self) -> dict[str, Any]:
        return self._dashboard().poll_serve_applications()

    async def apoll(self) -> dict[str, Any]:
        return await self._dashboard().aserve_applications()

    def still_listed(self, payload: dict[str, Any]) -> dict[str, str]:
        """``{app: Serve's status}`` for the apps Serve still lists."""
        apps = payload.get("applications") or {}
        return {name: str(apps[name].get("status")) for name in self.app_names if name in apps}

    def evaluate(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        if not self.still_listed(payload):
            return {"status": "success", "apps": {}}
        return None

    def progress(self, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        listed = self.still_listed(payload)
        return ", ".join(f"{app}={status}" for app, status in listed.items()) or "gone", {"apps": listed}
