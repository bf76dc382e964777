"""The drain waits: a scale-in's Ray nodes (RayNodesDrainedTrigger) and a retired cluster's Serve proxy
(ServeIngressDrainedTrigger).

RayNodesDrainedTrigger waits until Ray's state API lists the nodes a scale-in drains as DEAD.

A drained node's raylet exits once Ray has moved its work off (``raylift.hooks.ray_drain``), and the state API
then lists it ``DEAD`` ("Terminated due to preemption: ..."). Only then may its task or instance be stopped.
"""

from __future__ import annotations

from typing import Any

from raylift.triggers.dashboard import RayDashboardTrigger
from raylift.triggers.polling import PollingTrigger


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


# Ray Serve's proxy counts the HTTP requests it is carrying (streams included, until their last byte):
# ray/serve/_private/request_ingress_metrics.py registers the gauge ``serve_num_ongoing_http_requests`` (tags
# node_id, node_ip_address) and ray/serve/_private/proxy.py sets it as each request starts and ends
# (_ongoing_requests_start/_end; health checks and route listings are not counted). Ray's metrics agent exports it
# on the node's ``--metrics-export-port`` under the "ray" namespace (ray/_private/metrics_agent.py: f"{namespace}_"
# + name), the name Ray's own Serve dashboard queries (ray/dashboard/modules/metrics/dashboards/
# serve_dashboard_panels.py: ray_serve_num_ongoing_http_requests).
ONGOING_HTTP = "ray_serve_num_ongoing_http_requests"


def ongoing_requests(exposition: str) -> float:
    """The requests Serve's proxies on one node are carrying, from its Prometheus exposition (summed over the
    series). A proxy that never took a request has not set the gauge, so Ray exports no series: 0.
    :raises ValueError: the text is not a Prometheus exposition."""
    import math

    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == ONGOING_HTTP and not math.isnan(sample.value):
                total += float(sample.value)
    return total


class ServeIngressDrainedTrigger(PollingTrigger):
    """Wait until the Serve proxy of a cluster the endpoint no longer points at carries no request.

    Blue/green's retirement: after the switch, blue keeps serving what it was sent (long streams on keep-alive
    connections, and new requests from resolvers that still hold blue's address for the record's TTL). The wait
    ends once ``hold_until`` (epoch seconds: the switch plus the TTL) has passed **and** ``quiet_polls`` polls in a
    row read 0 in-flight requests from the proxy's own gauge (Ray reports it every few seconds: one 0 may be a
    report from before a request started). Emits ``success`` with ``ongoing``; ``timeout`` with the last count
    (blue keeps running: nothing is cut).

    :param metrics_url: the head node's Ray metrics export, ``http://host:8080/metrics``.
    :param hold_until: epoch seconds before which the wait never ends.
    :param timeout_s: the wait's deadline, in seconds from the first poll.
    :param poll_interval_s: seconds between polls.
    :param quiet_polls: consecutive polls that must read 0.
    """

    def __init__(self, metrics_url: str, *, hold_until: float, timeout_s: float, poll_interval_s: float = 5.0,
                 quiet_polls: int = 2) -> None:
        super().__init__(timeout_s=timeout_s, poll_interval_s=poll_interval_s)
        self.metrics_url, self.hold_until, self.quiet_polls = metrics_url, float(hold_until), max(1, int(quiet_polls))
        self._quiet = 0

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"metrics_url": self.metrics_url, "hold_until": self.hold_until, "timeout_s": self.timeout_s,
             "poll_interval_s": self.poll_interval_s, "quiet_polls": self.quiet_polls},
        )

    @property
    def subject(self) -> str:
        return f"the drain of Serve's proxy at {self.metrics_url}"

    def poll(self) -> dict[str, Any]:
        import time

        import httpx

        response = httpx.get(self.metrics_url, timeout=10)
        response.raise_for_status()
        return {"ongoing": ongoing_requests(response.text), "at": time.time()}

    async def apoll(self) -> dict[str, Any]:
        import time

        import httpx

        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.get(self.metrics_url)
        response.raise_for_status()
        return {"ongoing": ongoing_requests(response.text), "at": time.time()}

    def evaluate(self, observed: dict[str, Any]) -> dict[str, Any] | None:
        self._quiet = self._quiet + 1 if observed["ongoing"] == 0 else 0
        if self._quiet >= self.quiet_polls and observed["at"] >= self.hold_until:
            return {"status": "success", "ongoing": 0}
        return None

    def progress(self, observed: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        held = max(0.0, self.hold_until - observed["at"])
        text = f"{observed['ongoing']:g} request(s) in flight" + (f", {held:.0f} s of the DNS TTL left" if held else "")
        return text, {"ongoing": observed["ongoing"]}
