"""Drain Ray worker nodes before their capacity goes: Ray's own drain API, reached through the dashboard.

Why a Ray job: raylift reaches a cluster only through its dashboard's HTTP API (the GCS port is not open to the
Airflow workers, and the dashboard is where the cluster's token is checked). The dashboard has no drain endpoint,
so the drain is Ray's own ``ray drain-node`` CLI (``GcsClient.drain_node``, the call autoscaler v2 makes) run as a
Ray job on the head, where the job's ``RAY_ADDRESS`` is the cluster's GCS. The reason is
``DRAIN_NODE_REASON_PREEMPTION``: Ray always accepts it (an ``IDLE_TERMINATION`` drain is refused on a node with
work), stops scheduling on the node, lets Serve start the node's replicas elsewhere before the deadline, and the
node's raylet exits once it is idle. Ray's state API (``GET /api/v0/nodes``) then lists the node ``DEAD`` with the
state message ``Terminated due to preemption: <our reason>``: that is the wait's condition.

Which nodes go: the ones with the fewest Serve replicas, then the fewest live actors (Ray's state API), never the
head. Ray cannot cancel a drain: a drain that outlasts its deadline leaves the nodes taking no new work.
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from raylift.hooks.ray_dashboard import RayDashboardHook

DRAIN_REASON = "DRAIN_NODE_REASON_PREEMPTION"  # ray.core.generated.autoscaler_pb2.DrainNodeReason
NODES_PATH = "/api/v0/nodes?detail=1&limit=10000"
ALIVE_ACTORS_PATH = "/api/v0/actors?limit=10000&filter_keys=state&filter_predicates=%3D&filter_values=ALIVE"
DEAD = "DEAD"


@dataclass(frozen=True)
class RayNode:
    """One Ray node as the state API lists it, with what runs on it (for picking the ones to drain)."""

    node_id: str
    node_ip: str
    is_head: bool
    replicas: int = 0  # live Serve replicas on the node
    actors: int = 0  # live actors on the node (replicas included)


def ray_nodes(nodes_payload: Mapping[str, Any], serve_payload: Mapping[str, Any],
              actors_payload: Mapping[str, Any]) -> list[RayNode]:
    """The ALIVE nodes of ``GET /api/v0/nodes``, each with its Serve replicas (``GET /api/serve/applications/``)
    and live actors (``GET /api/v0/actors``) counted."""
    replicas = {node: len(names) for node, names in RayDashboardHook.replica_cpus(dict(serve_payload)).items()}
    actors = Counter(a.get("node_id") for a in actors_payload["data"]["result"]["result"] if a.get("node_id"))
    return [
        RayNode(n["node_id"], str(n.get("node_ip", "")), bool(n.get("is_head_node")), replicas.get(n["node_id"], 0),
                actors.get(n["node_id"], 0))
        for n in nodes_payload["data"]["result"]["result"]
        if n.get("state") == "ALIVE"
    ]


def removal_order(groups: Mapping[str, Iterable[RayNode]]) -> list[str]:
    """Members (an ECS task, an EC2 instance: what is stopped as one) in the order to remove them: those running
    fewest Serve replicas first, then fewest actors, then by name (a stable choice). A member with a head node on
    it is never listed."""
    ranked = []
    for member, nodes in groups.items():
        nodes = list(nodes)
        if any(n.is_head for n in nodes):
            continue
        ranked.append((sum(n.replicas for n in nodes), sum(n.actors for n in nodes), member))
    return [member for *_, member in sorted(ranked)]


def drain_entrypoint(node_ids: Iterable[str], reason_message: str, deadline_s: int) -> str:
    """The Ray job's shell command: one ``ray drain-node`` per node; the first refusal fails the job."""
    return " && ".join(
        shlex.join(["ray", "drain-node", "--node-id", node_id, "--reason", DRAIN_REASON,
                    "--reason-message", reason_message, "--deadline-remaining-seconds", str(int(deadline_s))])
        for node_id in node_ids
    )


def node_states(nodes_payload: Mapping[str, Any], node_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{node_id: {"state", "state_message", "node_ip"}}`` for ``node_ids`` in ``GET /api/v0/nodes``; a node the
    state API no longer lists at all counts as DEAD (Ray forgets dead nodes after a while)."""
    listed = {n["node_id"]: n for n in nodes_payload["data"]["result"]["result"]}
    out = {}
    for node_id in node_ids:
        node = listed.get(node_id)
        out[node_id] = ({"state": DEAD, "state_message": "no longer listed by Ray", "node_ip": ""} if node is None else
                        {"state": node.get("state"), "state_message": node.get("state_message") or "",
                         "node_ip": node.get("node_ip", "")})
    return out


class RayDrainHook(RayDashboardHook):
    """The dashboard calls a drain needs: the nodes and what runs on them, the drain job, the nodes' states."""

    def __init__(self, address: str | None = None, *, conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(address, conn_id=conn_id, **kwargs)
        self.conn_id = conn_id  # for the job's wait, which builds its own hook from the same connection

    def nodes_with_load(self) -> list[RayNode]:
        """The cluster's ALIVE nodes, each with its Serve replicas and live actors."""
        return ray_nodes(self._poll_json(NODES_PATH), self.serve_applications(), self._poll_json(ALIVE_ACTORS_PATH))

    def submit_drain(self, node_ids: list[str], *, reason_message: str, deadline_s: int) -> str:
        """Submit the Ray job that asks Ray to drain ``node_ids`` (``ray drain-node`` on the head); its id. The job
        only hands the request to the GCS (seconds); ``raylift.targets.scale_in.request_drain`` waits for it."""
        return self.submit_job(drain_entrypoint(node_ids, reason_message, deadline_s))

    def poll_nodes(self) -> dict[str, Any]:
        """``GET /api/v0/nodes`` (dead nodes included) in this process; the async twin is ``anodes``."""
        return self._poll_json(NODES_PATH)

    async def anodes(self) -> dict[str, Any]:
        """``GET /api/v0/nodes`` without blocking the triggerer's loop."""
        return await self._apoll_json(NODES_PATH)
