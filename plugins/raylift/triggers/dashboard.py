"""RayDashboardTrigger: the part every wait on a Ray dashboard shares (its URL, and the hook built on first poll).

The Serve waits (``triggers/serve.py``) and the Ray job wait (``triggers/ray_job.py``) read the same dashboard
through ``RayDashboardHook``; the loop, retry rule and events are ``PollingTrigger``'s.
"""

from __future__ import annotations

from typing import Any

from raylift.triggers.polling import PollingTrigger


class RayDashboardTrigger(PollingTrigger):
    """A ``PollingTrigger`` that reads the Ray dashboard at ``dashboard_url`` (``http://host:8265``)."""

    def __init__(self, dashboard_url: str, *, timeout_s: float, poll_interval_s: float) -> None:
        super().__init__(timeout_s=timeout_s, poll_interval_s=poll_interval_s)
        self.dashboard_url = dashboard_url
        self._hook: Any = None

    def _dashboard(self) -> Any:
        from raylift.hooks.ray_dashboard import RayDashboardHook

        if self._hook is None:  # built on first poll: the triggerer is another host (its token, its env)
            self._hook = RayDashboardHook(self.dashboard_url, timeout_s=10)
        return self._hook
