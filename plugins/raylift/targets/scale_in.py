"""Scale-in that drains Ray first: pick the worker nodes to remove, drain them in Ray, then stop exactly those.

Without it, lowering an ECS service's desiredCount or an EKS node group's desiredSize lets AWS pick the tasks or
instances to stop, and Ray loses them mid-request (a Serve replica, a job's actors). A target that mixes in
``DrainedScaleIn`` (``ecs``, ``eks``) says what its members are (an ECS task, an EC2 instance: what is stopped as
one) and which IPs each has; the Ray node on a member is the one whose ``node_ip`` is among them. The scale step
(``ScaleClusterOperator``) then:

1. ``scale_in_plan``: None unless the wanted count is below the current one. Members with no Ray node (still
   starting) go first, with nothing to drain; then those running the fewest Serve replicas / actors
   (``raylift.hooks.ray_drain.removal_order``); never the head's.
2. ``start_drain``: Ray's own drain on the chosen nodes, and the trigger that waits until Ray lists them DEAD.
3. ``finish_scale_in``: only after that, capacity goes down by exactly the planned members; then the usual scale.

A drain that does not finish by its deadline fails the step with the nodes named and capacity untouched.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from raylift.config import DRAIN_TIMEOUT_S
from raylift.errors import ClusterError
from raylift.records import ClusterExpectation

if TYPE_CHECKING:
    from raylift.hooks.ray_drain import RayDrainHook
    from raylift.triggers.polling import PollingTrigger

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScaleInPlan:
    """What a scale-in removes: ``members`` (task ARNs / instance ids) and the Ray nodes on them (``nodes``:
    node id -> the member it runs on). JSON-able: it travels through the deferral."""

    workers: int
    members: list[str]
    nodes: dict[str, str] = field(default_factory=dict)
    node_ips: dict[str, str] = field(default_factory=dict)  # node id -> its IP, for messages
    keep: list[str] = field(default_factory=list)  # the members that stay

    def to_xcom(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_xcom(cls, data: Mapping[str, Any]) -> ScaleInPlan:
        return cls(int(data["workers"]), list(data["members"]), dict(data.get("nodes") or {}),
                   dict(data.get("node_ips") or {}), list(data.get("keep") or []))

    def describe_nodes(self) -> str:
        return ", ".join(f"{node} ({self.node_ips.get(node, '?')} on {member})" for node, member in self.nodes.items())


def request_drain(dashboard: RayDrainHook, node_ids: list[str], *, reason_message: str, deadline_s: int,
                  timeout_s: float = 120.0) -> None:
    """Ask Ray to drain ``node_ids`` (a Ray job running ``ray drain-node`` on the head) and wait, in this process,
    for that job: it only hands the request to the GCS (seconds; the long wait, for the nodes to go, is the
    trigger's). ClusterError with the job's log when Ray refused: nothing is stopped then."""
    from raylift.triggers.ray_job import RayJobFinishedTrigger

    job = dashboard.submit_drain(node_ids, reason_message=reason_message, deadline_s=deadline_s)
    event = RayJobFinishedTrigger(dashboard.address, job, timeout_s=timeout_s, cluster_conn_id=dashboard.conn_id).wait()
    status = event.get("job_status")
    if event["status"] != "success" or status != "SUCCEEDED":
        raise ClusterError(
            f"Ray did not take the drain of node(s) {', '.join(node_ids)} (job {job}: {status or event.get('message')}): "
            f"{dashboard.job_logs(job)[-800:]} The cluster's capacity was not changed; look at the head's job logs, "
            "then run the scale step again."
        )
    log.info("Ray accepted the drain of node(s) %s (job %s)", ", ".join(node_ids), job)


class DrainedScaleIn:
    """Mixed into a target whose scale-in can name the members it removes (see the module docstring)."""

    #: seconds Ray gets to drain the nodes (its deadline) before the step fails with capacity unchanged
    drain_timeout_s: float = DRAIN_TIMEOUT_S
    drain_poll_interval_s: float = 5.0
    cluster_conn_id: str | None

    # -- what a target supplies ------------------------------------------------------------------
    # A target that reaches Ray's dashboard (``ecs``) supplies ``scale_in_members`` and ``drain_dashboard`` and keeps
    # ``scale_in_plan`` / ``start_drain`` below; one that reaches only Kubernetes (``eks``: the drain runs as a Job
    # in the cluster) overrides those two instead.
    def scale_in_members(self, workers: int) -> tuple[int, dict[str, set[str]]] | None:
        """How many members a scale to ``workers`` removes, and every current member's IPs; None when it removes
        none (a scale-out or the same count: the plain ``scale``)."""
        raise NotImplementedError(f"{type(self).__name__} overrides scale_in_plan instead")

    @abstractmethod
    def remove_members(self, plan: ScaleInPlan) -> None:
        """Lower the capacity by exactly ``plan.members`` (their Ray nodes are drained by now)."""

    def drain_dashboard(self) -> RayDrainHook:
        """The cluster's dashboard, with its token."""
        raise NotImplementedError(f"{type(self).__name__} overrides start_drain instead")

    @abstractmethod
    def scale(self, *, workers: int) -> ClusterExpectation: ...

    @abstractmethod
    def describe_cluster(self) -> str: ...

    # -- the three steps -------------------------------------------------------------------------
    def scale_in_plan(self, workers: int) -> ScaleInPlan | None:
        """The members a scale to ``workers`` removes and the Ray nodes on them, or None when it removes none.
        ClusterError, with nothing changed, when too few members can go (the head's own, say)."""
        from raylift.hooks.ray_drain import removal_order

        found = self.scale_in_members(workers)
        if found is None:
            return None
        count, members = found
        by_ip = {ip: member for member, ips in members.items() for ip in ips}
        on: dict[str, list[Any]] = {member: [] for member in members}
        for node in self.drain_dashboard().nodes_with_load():
            if node.node_ip in by_ip:
                on[by_ip[node.node_ip]].append(node)
        unjoined = sorted(member for member, nodes in on.items() if not nodes)
        order = unjoined + [m for m in removal_order(on) if m not in unjoined]
        if len(order) < count:
            raise ClusterError(
                f"Scaling {self.describe_cluster()} to {workers} worker(s) removes {count} member(s), but only "
                f"{len(order)} can go without stopping the Ray head ({sorted(members)}). Nothing was changed."
            )
        chosen = order[:count]
        nodes = {n.node_id: member for member in chosen for n in on[member]}
        ips = {n.node_id: n.node_ip for member in chosen for n in on[member]}
        return ScaleInPlan(workers, chosen, nodes, ips, sorted(set(members) - set(chosen)))

    def start_drain(self, plan: ScaleInPlan) -> PollingTrigger | None:
        """Ask Ray to drain ``plan``'s nodes; the trigger that waits until Ray lists them DEAD (None: no node to
        drain, the members never joined Ray)."""
        from raylift.triggers.drain import RayNodesDrainedTrigger

        if not plan.nodes:
            return None
        dashboard = self.drain_dashboard()
        request_drain(dashboard, list(plan.nodes),
                      reason_message=f"raylift scale-in of {self.describe_cluster()} to {plan.workers} worker(s)",
                      deadline_s=int(self.drain_timeout_s))
        log.info("draining Ray node(s) %s before removing them", plan.describe_nodes())
        return RayNodesDrainedTrigger(dashboard.address, list(plan.nodes), timeout_s=self.drain_timeout_s,
                                      poll_interval_s=self.drain_poll_interval_s, cluster_conn_id=self.cluster_conn_id)

    def finish_scale_in(self, plan: ScaleInPlan, event: Mapping[str, Any] | None = None) -> ClusterExpectation:
        """After the drain's event: remove exactly ``plan.members``, then the usual ``scale``. ClusterError naming
        the nodes, with capacity unchanged, when the drain did not finish."""
        if event is not None and event.get("status") != "success":
            raise ClusterError(
                f"Ray did not finish draining node(s) {plan.describe_nodes()} of {self.describe_cluster()} "
                f"({event.get('message')}). The cluster's capacity was not changed. Ray keeps draining them (it "
                "cannot cancel a drain: they take no new work and leave once idle); look at what still runs there in "
                "the Ray dashboard, then run the scale step again."
            )
        self.remove_members(plan)
        log.info("removed %s after their Ray nodes drained", ", ".join(plan.members))
        return self.scale(workers=plan.workers)
