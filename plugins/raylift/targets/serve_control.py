"""One Serve-control implementation for every target that reaches Serve through a Ray dashboard (local, ray, ecs).

Why: reading the applied config, writing a whole config, and the waits for an app to run or to go are the same
REST calls whoever started the cluster; only where the dashboard is, and whose token it takes, differ. A target
says those two things (``serve_dashboard``, ``serve_dashboard_url``, ``dashboard_trigger_auth``) and inherits the
rest. The compare-before-write and the lease around it are ``raylift.release.writer``'s, above this.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from raylift.errors import ClusterError
from raylift.records import ClusterState

if TYPE_CHECKING:
    from raylift.hooks.ray_dashboard import RayDashboardHook
    from raylift.triggers.serve import ServeApplicationGoneTrigger, ServeApplicationsTrigger


class DashboardServeControl:
    """Mixin for a ``Target``: cluster state, the Serve config and its waits through the cluster's Ray dashboard."""

    _submitted_at: float | None = None  # when this task last submitted a Serve config

    def serve_dashboard(self) -> RayDashboardHook:
        """The dashboard hook, with this cluster's own token (if any)."""
        raise NotImplementedError

    def serve_dashboard_url(self) -> str:
        raise NotImplementedError

    def dashboard_down_hint(self) -> str:
        """What to do when no dashboard answers (appended to the error, after the URL)."""
        return ": is the cluster up?"

    def dashboard_trigger_auth(self) -> dict[str, Any]:
        """Where a trigger, rebuilt on the triggerer, finds the token: names only, never the token."""
        return {"cluster_conn_id": getattr(self, "cluster_conn_id", None)}

    def cluster_state(self) -> ClusterState:
        return self.serve_dashboard().cluster_state()

    def current_serve_config(self) -> dict[str, Any]:
        dashboard = self.serve_dashboard()
        if not dashboard.is_up():
            raise ClusterError(f"No Ray dashboard answers on {self.serve_dashboard_url()}{self.dashboard_down_hint()}")
        return dashboard.deployed_config(dashboard.serve_applications())

    def apply_serve_config(self, config: dict[str, Any]) -> None:
        # Taken before the PUT: Serve stamps the deploy when it receives it, and the trigger only counts deploys
        # at or after this. Taken after, a PUT answered more than a second late (a busy box) made a DEPLOY_FAILED
        # app look stale and the deploy wait ran to its timeout.
        self._submitted_at = time.time()
        self.serve_dashboard().put_serve_config(config)

    def resume_after_submit(self, submitted_at: float) -> None:
        """The wait counts deploys from an earlier try's submission (see ``Target.resume_after_submit``)."""
        self._submitted_at = submitted_at

    def deploy_trigger(self, *, app_names: list[str], timeout_s: float,
                       optional: bool = False) -> ServeApplicationsTrigger:
        from raylift.triggers.serve import ServeApplicationsTrigger

        return ServeApplicationsTrigger(
            dashboard_url=self.serve_dashboard_url(),
            app_names=app_names,
            submitted_at=self._submitted_at or time.time(),
            timeout_s=timeout_s,
            unscheduled_fails=optional,
            **self.dashboard_trigger_auth(),
        )

    def undeploy_trigger(self, *, app_name: str, timeout_s: float) -> ServeApplicationGoneTrigger:
        from raylift.triggers.serve import ServeApplicationGoneTrigger

        return ServeApplicationGoneTrigger(dashboard_url=self.serve_dashboard_url(), app_names=[app_name],
                                           timeout_s=timeout_s, **self.dashboard_trigger_auth())
