"""RayDashboardTrigger: the part every wait on a Ray dashboard shares (its URL, and the hook built on first poll).

The Serve waits (``triggers/serve.py``) and the Ray job wait (``triggers/ray_job.py``) read the same dashboard
through ``RayDashboardHook``; the loop, retry rule and events are ``PollingTrigger``'s.
"""

from __future__ import annotations

from typing import Any

from raylift.triggers.polling import PollingTrigger


class RayDashboardTrigger(PollingTrigger):
    """A ``PollingTrigger`` that reads the Ray dashboard at ``dashboard_url`` (``http://host:8265``).

    The token, if any, is looked up on the triggerer (another host), never serialized: from the cluster's
    ``raylift_cluster`` connection (``cluster_conn_id``), or, for the local cluster raylift started on that
    machine (``local_token``), where Ray's CLI reads it.
    """

    def __init__(self, dashboard_url: str, *, timeout_s: float, poll_interval_s: float,
                 cluster_conn_id: str | None = None, local_token: bool = False) -> None:
        super().__init__(timeout_s=timeout_s, poll_interval_s=poll_interval_s)
        self.dashboard_url = dashboard_url
        self.cluster_conn_id = cluster_conn_id
        self.local_token = local_token
        self._hook: Any = None

    def auth_kwargs(self) -> dict[str, Any]:
        """Where the token comes from, for ``serialize()`` (names only, never the token)."""
        return {"cluster_conn_id": self.cluster_conn_id, "local_token": self.local_token}

    def _dashboard(self) -> Any:
        from raylift.hooks.ray_dashboard import RayDashboardHook

        if self._hook is None:  # built on first poll: the triggerer is another host (its token, its env)
            from raylift.hooks.ray_dashboard import ray_auth_token

            token = ray_auth_token() if self.local_token and not self.cluster_conn_id else None
            self._hook = RayDashboardHook(self.dashboard_url, conn_id=self.cluster_conn_id, timeout_s=10,
                                          auth_token=token)
        return self._hook
