"""RayNodesDrainedTrigger: wait until Ray's state API lists the nodes a scale-in drains as DEAD.

A drained node's raylet exits once Ray has moved its work off (``raylift.hooks.ray_drain``), and the state API
then lists it ``DEAD`` ("Terminated due to preemption: ..."). Only then may its task or instance be stopped.
"""

from __future__ import annotations

from typing import Any

from raylift.triggers.dashboard import RayDashboardTrigger


class RayNodesDrainedTrigger(RayDashboardTrigger):
    """Poll ``GET /api/v0/nodes`` until every node of ``node_ids`` is DEAD (or no longer listed).

    Emits ``success`` with ``nodes`` (each node's state and Ray's state message), or ``timeout`` naming the nodes
    still ALIVE; ``failed`` when the dashboard refuses the token.

    :param dashboard_url: the dashboard, ``http://host:8265``.
    :param node_ids: the Ray node ids (hex) being drained.
    :param timeout_s: the drain's deadline, in seconds from the first poll.
    :param poll_interval_s: seconds between polls.
    """

    def __init__(self, dashboard_url: str, node_ids: list[str], timeout_s: float = 600.0,
                 poll_interval_s: float = 5.0, cluster_conn_id: str | None = None, local_token: bool = False) -> None:
        super().__init__(dashboard_url, timeout_s=timeout_s, poll_interval_s=poll_interval_s,
                         cluster_conn_id=cluster_conn_id, local_token=local_token)
        self.node_ids = list(node_ids)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"dashboard_url": self.dashboard_url, "node_ids": self.node_ids, "timeout_s": self.timeout_s,
             "poll_interval_s": self.poll_interval_s, **self.auth_kwargs()},
        )

    def _dashboard(self) -> Any:
        from raylift.hooks.ray_drain import RayDrainHook

        if self._hook is None:  # built on first poll: the triggerer is another host (its token, its env)
            from raylift.hooks.ray_dashboard import ray_auth_token

            token = ray_auth_token() if self.local_token and not self.cluster_conn_id else None
            self._hook = RayDrainHook(self.dashboard_url, conn_id=self.cluster_conn_id, timeout_s=10, auth_token=token)
        return self._hook

    @property
    def subject(self) -> str:
        return f"the drain of Ray node(s) {', '.join(self.node_ids)} at {self.dashboard_url}"

    def poll(self) -> dict[str, Any]:
        from raylift.hooks.ray_drain import node_states

        return node_states(self._dashboard().poll_nodes(), self.node_ids)

    async def apoll(self) -> dict[str, Any]:
        from raylift.hooks.ray_drain import node_states

        return node_states(await self._dashboard().anodes(), self.node_ids)

    def evaluate(self, observed: dict[str, Any]) -> dict[str, Any] | None:
        from raylift.hooks.ray_drain import DEAD

        if all(node["state"] == DEAD for node in observed.values()):
            return {"status": "success", "nodes": observed}
        return None

    def progress(self, observed: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        from raylift.hooks.ray_drain import DEAD

        alive = sorted(node_id for node_id, node in observed.items() if node["state"] != DEAD)
        return f"still {', '.join(alive)} not drained" if alive else "all drained", {"not_drained": alive}
