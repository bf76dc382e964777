"""A blue/green release on EKS: KubeRay starts the new Ray cluster (pending) beside the serving one (active), raylift
holds the switch until its gate has judged the pending cluster, then KubeRay switches, or removes the pending one.

Why a hold: under ``NewCluster`` KubeRay (v1.7) moves the RayService's Services to the pending cluster in the
reconcile after its Serve apps are all RUNNING, before anyone measured it, and the RayService CRD has no field that
delays it (``spec.upgradeStrategy`` is ``type`` plus the incremental upgrade's ``clusterUpgradeOptions``). The
incremental upgrade is the one KubeRay mechanism that holds: ``raylift.kuberay.upgrade`` says how
(``stepSizePercent: 0``, ``maxSurgePercent: 100``: the pending cluster at full Serve capacity, 0 % of the traffic).

The steps (each a method; the DAG wires them):

1. ``hold_candidate(config)``: the node group grown for a second cluster (the size before it recorded), the spec
   applied under the held strategy. KubeRay creates the pending cluster; ``candidate_trigger`` waits until it serves
   every app at capacity 100 with no traffic;
2. ``eks_candidate_endpoint()``: the pending cluster's own Serve Service (KubeRay's per-cluster
   ``<cluster>-serve-svc``, the incremental upgrade's route target), for the benchmark's candidate arm;
3. ``promote_candidate()``: the spec re-applied with the configured strategy; KubeRay finishes the upgrade its way
   (``NewCluster``: the Services move to the ready pending cluster at once), ``promotion_trigger`` waits for it;
   or ``remove_candidate()``: the previous ``rayClusterConfig`` / ``serveConfigV2`` re-applied under the hold, which is
   KubeRay's incremental rollback (the pending cluster scaled to 0 and deleted, the active one untouched);
   ``removal_trigger`` waits for it;
4. ``restore_node_groups()``: the configured strategy back on the spec, and the worker node group back to its size
   before the headroom, by terminating exactly the instances no Ray pod runs on any more.

Needs a Gateway API controller with a GatewayClass (target option ``gateway_class``): KubeRay builds a Gateway and an
HTTPRoute for every incremental upgrade, held or not, and raises the pending cluster's capacity only once they are
ready. The state of a release is kept in the state store (``eks/<ns>/<rayservice>/blue_green.json``).

The release's interface (``raylift.targets.base``, driven by ``raylift.release.blue_green``) maps onto the steps:
the pair is (the active cluster's name, ``"pending"``: KubeRay names the pending cluster only when it creates it);
the candidate's config write (``on_cluster("pending").apply_serve_config``) is ``hold_candidate``, its deploy wait
``candidate_trigger``, its endpoint ``eks_candidate_endpoint``; ``switch_endpoint`` is ``promote_candidate`` and its
wait, ``retire_cluster`` the node group restored once KubeRay deleted the old cluster, ``remove_cluster``
``remove_candidate``, its wait and the node group restored.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from raylift.errors import ClusterError, RayliftValueError

if TYPE_CHECKING:
    from raylift.hooks.autoscaling_group import AutoScalingGroupHook
    from raylift.hooks.kuberay import KubeRayHook
    from raylift.store import ObjectStore
    from raylift.targets.base import ClusterPair
    from raylift.triggers.rayservice import RayServiceUpgradeTrigger

log = logging.getLogger(__name__)
SERVE_PORT = 8000  # the head's "serve" port (raylift.kuberay.manifest), which KubeRay's serve Services expose
HOLD_NEEDS_GATEWAY = (
    "needs the eks target option 'gateway_class': KubeRay (v1.7) switches a NewCluster upgrade to the new cluster as "
    "soon as its Serve apps run, and no RayService field holds that switch; raylift holds it with KubeRay's "
    "incremental upgrade at stepSizePercent 0, for which KubeRay builds a Gateway and HTTPRoute from that "
    "GatewayClass (a Gateway API controller must run in the cluster). Without one, release in place "
    "(apply_serve_config: KubeRay's NewCluster upgrade, switched on health)."
)
GATEWAY_PORT = 80  # KubeRay's utils.DefaultGatewayListenerPort: the "http" listener of the Gateway it creates
ARM_PREFIX = "/raylift-arm"  # the path under which each arm's HTTPRoute answers on that Gateway
ARM_ROUTE_WAIT_S = 60.0  # how long the Gateway controller may take to accept an arm's HTTPRoute
GATEWAY_ADDRESS_HINT = (
    "Its controller gives it an address through a LoadBalancer Service: terraform's eks_ray module "
    "(blue_green_gateway = true) has Envoy Gateway ask the AWS Load Balancer Controller for an internal NLB "
    "(EnvoyProxy raylift-internal-nlb on the GatewayClass). Check `kubectl get gateway -n <namespace>` and the "
    "envoy Service in envoy-gateway-system; KubeRay does not grow the candidate before the Gateway is Programmed.")
CANDIDATE = "pending"  # the candidate's name in a ClusterPair: KubeRay names the pending cluster when it creates it
DELETION_DELAY_S = 60.0  # KubeRay's default rayClusterDeletionDelaySeconds: an unreferenced cluster goes this late
RESTORE_MARGIN_S = 120.0  # beyond that delay: KubeRay's next reconcile, the pods' graceful termination


class NodesStillHeldError(ClusterError):
    """``restore_node_groups`` found too few instances free of Ray pods (KubeRay has not deleted the old or removed
    cluster yet); nothing was terminated. Passes: the release retries it for a bounded time."""


class EksBlueGreen:
    """Mixed into ``EksTarget`` (whose attributes it uses): the EKS half of a blue/green release."""

    namespace: str
    rayservice_name: str
    upgrade_strategy: str
    gateway_class: str | None
    cluster_name: str
    worker_nodegroup: str
    kubernetes_conn_id: str | None
    poll_interval_s: float
    aws: Any
    BLUE_GREEN_RECORD: ClassVar[str] = "blue_green.json"
    HEADROOM_RECORD: ClassVar[str] = "headroom.json"

    if TYPE_CHECKING:

        def _kuberay(self) -> KubeRayHook: ...

        def _eks(self) -> Any: ...

        @property
        def _asg(self) -> AutoScalingGroupHook: ...

        @property
        def _asg_name(self) -> str: ...

        def _state_key(self, leaf: str) -> str: ...

        def state_store(self) -> ObjectStore: ...

        def recorded_workers(self) -> int: ...

        def render(self, config: dict[str, Any], workers: int) -> dict[str, Any]: ...

        def _bound_max_replicas(self, manifest: dict[str, Any], workers: int) -> None: ...

        def nodes_for(self, workers: int, strategy: str = "None") -> tuple[int, float]: ...

        def ensure_headroom(self, workers: int, *, new_cluster: bool, strategy: str | None = None) -> None: ...

        def _apply_unless_changed(
            self, hook: Any, manifest: dict[str, Any], previous: dict[str, Any] | None
        ) -> None: ...

        def region(self) -> str: ...

        def current_serve_config(self) -> dict[str, Any]: ...

    # -- the state store record --------------------------------------------------------------------
    def blue_green_record(self) -> dict[str, Any]:
        """``{"state", "active_before", "candidate", "at"}`` of the last blue/green release, or {}."""
        record: dict[str, Any] | None = self.state_store().read_json(self._state_key(self.BLUE_GREEN_RECORD))
        return record or {}

    def _write_record(self, **fields: Any) -> None:
        record = {**self.blue_green_record(), **fields, "at": datetime.now(UTC).isoformat()}
        self.state_store().write_json(self._state_key(self.BLUE_GREEN_RECORD), record)

    def _live(self) -> dict[str, Any]:
        live = self._kuberay().get_rayservice(self.rayservice_name, self.namespace)
        if live is None:
            raise ClusterError(f"RayService {self.namespace}/{self.rayservice_name} does not exist: a first release "
                               "has nothing to hold beside; deploy it directly (apply_serve_config).")
        return live

    def _configured_strategy(self) -> dict[str, Any]:
        from raylift.kuberay.manifest import upgrade_strategy_spec

        return upgrade_strategy_spec(self.upgrade_strategy, self.gateway_class)

    def _held_strategy(self) -> dict[str, Any]:
        from raylift.kuberay.upgrade import held_upgrade_strategy

        if self.upgrade_strategy == "None":
            raise RayliftValueError("A blue/green release on EKS needs an upgrade strategy that starts a new cluster "
                                    "('NewCluster' or 'NewClusterWithIncrementalUpgrade'), not 'None'.")
        if not self.gateway_class:
            raise RayliftValueError(f"A blue/green release on EKS {HOLD_NEEDS_GATEWAY}")
        return held_upgrade_strategy(self.gateway_class)

    def _cluster_context(self) -> dict[str, Any] | None:
        if self.kubernetes_conn_id:
            return None
        from raylift.kuberay.eks_auth import eks_cluster_context

        return eks_cluster_context(self.cluster_name, self.region(), self.aws.aws_conn_id)

    def _trigger(self, condition: str, *, app_names: list[str] | None = None, candidate: str | None = None,
                 timeout_s: float) -> RayServiceUpgradeTrigger:
        from raylift.triggers.rayservice import RayServiceUpgradeTrigger

        return RayServiceUpgradeTrigger(
            self.rayservice_name, self.namespace, condition, kubernetes_conn_id=self.kubernetes_conn_id,
            app_names=app_names, candidate=candidate, timeout_s=timeout_s, poll_interval_s=self.poll_interval_s,
            cluster_context=self._cluster_context())

    # -- 1. hold -----------------------------------------------------------------------------------
    def hold_candidate(self, config: dict[str, Any]) -> str:
        """Apply ``config`` so that KubeRay starts a new Ray cluster beside the active one and routes it no traffic.

        Refused, with nothing changed, when the target has no ``gateway_class``, when no RayService serves yet,
        when the change would not start a new cluster (a Serve-config-only change is released in place), or when
        another upgrade is pending. The worker node group is grown for a second full cluster first (its size before
        is recorded for ``restore_node_groups``). Returns the active cluster's name (what serves meanwhile)."""
        from raylift.kuberay.manifest import to_apply_config
        from raylift.kuberay.status import upgrade_view
        from raylift.kuberay.upgrade import is_held, starts_new_cluster, with_upgrade_strategy

        held = self._held_strategy()
        workers = self.recorded_workers()
        rendered = self.render(config, workers)
        self._bound_max_replicas(rendered, workers)
        manifest = with_upgrade_strategy(rendered, held)
        hook = self._kuberay()
        live = self._live()
        view = upgrade_view(live)
        if not view.active:
            raise ClusterError(f"RayService {self.namespace}/{self.rayservice_name} has no active cluster yet: "
                               "nothing serves to hold a candidate beside. Deploy it directly first.")
        if view.pending:
            if is_held(live.get("spec") or {}) and live["spec"].get("rayClusterConfig") == manifest["spec"][
                    "rayClusterConfig"] and live["spec"].get("serveConfigV2") == manifest["spec"]["serveConfigV2"]:
                log.info("RayService %s/%s: candidate %s is held already (a retried step)", self.namespace,
                         self.rayservice_name, view.pending)
                return view.active
            raise ClusterError(f"RayService {self.namespace}/{self.rayservice_name} is upgrading already (pending "
                               f"cluster {view.pending}): promote or remove it first. Nothing was applied.")
        would_be = hook.apply_rayservice(manifest, dry_run=True)
        if not starts_new_cluster(live.get("spec"), would_be.get("spec") or {}):
            raise ClusterError(f"The release of RayService {self.namespace}/{self.rayservice_name} does not replace "
                               "its Ray cluster (only serveConfigV2 or replicas change): KubeRay applies it to the "
                               "running cluster, so there is no candidate to hold. Release it in place "
                               "(apply_serve_config). Nothing was applied.")
        self.ensure_headroom(workers, new_cluster=True, strategy="NewCluster")  # maxSurgePercent 100: a whole cluster
        self.state_store().write_json(self._state_key("previous.json"), live)  # what rollback() re-applies too
        self._write_record(state="holding", active_before=view.active, candidate=None,
                           previous=to_apply_config(live))
        self._apply_unless_changed(hook, manifest, live)
        log.warning("RayService %s/%s: a new Ray cluster starts beside %s, held at 0%% of the traffic until "
                    "promote_candidate", self.namespace, self.rayservice_name, view.active)
        return view.active

    def candidate_trigger(self, *, app_names: list[str], timeout_s: float) -> RayServiceUpgradeTrigger:
        """Defer until the pending cluster serves ``app_names`` at full capacity, still without traffic."""
        return self._trigger("held", app_names=app_names, timeout_s=timeout_s)

    # -- 2. measure --------------------------------------------------------------------------------
    def eks_candidate_endpoint(self) -> str:
        """The pending cluster's own Serve URL (KubeRay's per-cluster ``<cluster>-serve-svc``); ClusterError when the
        RayService has no pending cluster."""
        from raylift.kuberay.status import upgrade_view

        view = upgrade_view(self._kuberay().get_rayservice(self.rayservice_name, self.namespace))
        if not view.pending:
            raise ClusterError(f"RayService {self.namespace}/{self.rayservice_name} has no pending cluster "
                               f"({view.describe()}): there is no candidate to measure. Hold one first "
                               "(hold_candidate), and wait for candidate_trigger.")
        return self.arm_url(view.pending)

    def arm_url(self, cluster: str) -> str:
        """Where one Ray cluster's Serve answers from outside the Kubernetes cluster: KubeRay's own Gateway for this
        upgrade (``<rayservice>-gateway``, whose address is the internal NLB terraform's EnvoyProxy asks for), path
        ``/raylift-arm/<cluster>``, routed by an HTTPRoute raylift applies to that cluster's ``<cluster>-serve-svc``
        alone (the prefix rewritten to ``/``). Why: the benchmark and the smoke test run in Airflow's workers,
        which on MWAA or an ECS-hosted Airflow resolve no ``*.svc.cluster.local`` name; the Gateway is the one
        address KubeRay's hold already needs ready (Accepted and Programmed) before the candidate grows, so no
        load balancer is added per arm. KubeRay's own HTTPRoute keeps ``/`` with its weights (users' traffic is
        not changed: the longest prefix wins). ClusterError, naming what to fix, when the Gateway is missing or has
        no address, or when the route is not accepted in time; the route is applied again on a retry."""
        from tenacity import (
            RetryError,
            Retrying,
            retry_if_result,
            stop_after_attempt,
            stop_after_delay,
            wait_fixed,
        )

        self._check_cluster_name(cluster)
        hook = self._kuberay()
        gateway_name = f"{self.rayservice_name}-gateway"
        gateway = hook.get_gateway_object("gateways", gateway_name, self.namespace)
        address = gateway_address(gateway)
        if gateway is None or not is_gateway_ready(gateway) or not address:
            raise ClusterError(
                f"Gateway {self.namespace}/{gateway_name} (KubeRay's, for the held upgrade) "
                f"{'does not exist' if gateway is None else 'is not Accepted and Programmed with an address'}: "
                f"the release's arms are measured through it. {GATEWAY_ADDRESS_HINT}")
        route = arm_route(self.rayservice_name, self.namespace, cluster, gateway_name, SERVE_PORT)
        live = self._live()
        uid = (live.get("metadata") or {}).get("uid")
        if uid:  # Kubernetes deletes the route with the RayService, whatever happens to this release
            route["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayService",
                                                     "name": self.rayservice_name, "uid": uid}]
        hook.apply_httproute(route)
        name = route["metadata"]["name"]
        routes = sorted({*self.blue_green_record().get("arm_routes", []), name})
        self._write_record(arm_routes=routes)
        tries = math.ceil(ARM_ROUTE_WAIT_S / self.poll_interval_s) + 1  # a sleep that does not sleep stops too
        retrying = Retrying(stop=stop_after_delay(ARM_ROUTE_WAIT_S) | stop_after_attempt(tries),
                            wait=wait_fixed(self.poll_interval_s), retry=retry_if_result(lambda ready: not ready),
                            sleep=self._sleep)
        try:
            retrying(lambda: is_httproute_ready(gateway, hook.get_gateway_object("httproutes", name, self.namespace)))
        except RetryError:
            raise ClusterError(
                f"HTTPRoute {self.namespace}/{name} (cluster {cluster}'s arm on Gateway {gateway_name}) was not "
                f"Accepted with its references resolved within {ARM_ROUTE_WAIT_S:.0f} s: check that Service "
                f"{cluster}-serve-svc exists and the Gateway controller runs (kubectl describe httproute {name} "
                f"-n {self.namespace}). The serving cluster is untouched; run the step again.") from None
        return f"http://{_host(address)}:{GATEWAY_PORT}{ARM_PREFIX}/{cluster}"

    def _remove_arm_routes(self) -> None:
        """The release's arm HTTPRoutes deleted (they outlive nothing: KubeRay may delete their clusters)."""
        hook = self._kuberay()
        for name in self.blue_green_record().get("arm_routes", []):
            hook.delete_httproute(name, self.namespace)
        self._write_record(arm_routes=[])

    # -- 3. end ------------------------------------------------------------------------------------
    def promote_candidate(self) -> str:
        """Let KubeRay switch to the pending cluster: the spec re-applied with the configured upgrade strategy
        (its cluster config unchanged, so no other cluster starts). Returns the candidate's name, for
        ``promotion_trigger``. ClusterError, with nothing changed, when no candidate is pending."""
        from raylift.kuberay.manifest import to_apply_config
        from raylift.kuberay.status import upgrade_view
        from raylift.kuberay.upgrade import with_upgrade_strategy

        live = self._live()
        view = upgrade_view(live)
        if not view.pending:
            raise ClusterError(f"RayService {self.namespace}/{self.rayservice_name} has no pending cluster to promote "
                               f"({view.describe()}). Nothing was changed.")
        if view.rolling_back:
            raise ClusterError(f"KubeRay is removing pending cluster {view.pending} (a rollback runs): it cannot be "
                               "promoted. Nothing was changed.")
        self._write_record(state="promoting", candidate=view.pending)
        manifest = with_upgrade_strategy(to_apply_config(live), self._configured_strategy())
        self._apply_unless_changed(self._kuberay(), manifest, live)
        log.warning("RayService %s/%s: promoting %s (upgrade strategy %s)", self.namespace, self.rayservice_name,
                    view.pending, self.upgrade_strategy)
        return view.pending

    def promotion_trigger(self, candidate: str, *, timeout_s: float) -> RayServiceUpgradeTrigger:
        """Defer until KubeRay made ``candidate`` the active cluster (the switch happened)."""
        return self._trigger("promoted", candidate=candidate, timeout_s=timeout_s)

    def remove_candidate(self) -> str:
        """A rejected release: the spec from before ``hold_candidate`` re-applied under the hold, which KubeRay
        treats as a rollback (the pending cluster scaled to 0 and deleted; the active cluster, its spec and its
        traffic untouched). Returns the candidate's name, for ``removal_trigger``. ClusterError when the candidate
        was promoted already (use ``rollback``)."""
        from raylift.kuberay.status import upgrade_view
        from raylift.kuberay.upgrade import with_upgrade_strategy

        record = self.blue_green_record()
        previous = record.get("previous")
        if not previous:
            raise ClusterError(f"No blue/green release of RayService {self.namespace}/{self.rayservice_name} is "
                               "recorded: nothing to remove.")
        live = self._live()
        view = upgrade_view(live)
        if view.active != record.get("active_before"):
            raise ClusterError(f"RayService {self.namespace}/{self.rayservice_name} serves from {view.active}, not "
                               f"from {record.get('active_before')} as before the release: the candidate was promoted. "
                               "Roll back instead (rollback). Nothing was changed.")
        candidate = view.pending or str(record.get("candidate") or "")
        self._write_record(state="removing", candidate=candidate)
        manifest = with_upgrade_strategy(previous, self._held_strategy())
        self._apply_unless_changed(self._kuberay(), manifest, live)
        log.warning("RayService %s/%s: removing candidate %s; %s keeps serving", self.namespace,
                    self.rayservice_name, candidate or "(none started)", view.active)
        return candidate

    def removal_trigger(self, candidate: str, *, timeout_s: float) -> RayServiceUpgradeTrigger:
        """Defer until KubeRay's rollback removed ``candidate`` (neither active nor pending)."""
        return self._trigger("removed", candidate=candidate, timeout_s=timeout_s)

    # -- 4. give the extra nodes back ----------------------------------------------------------------
    def restore_node_groups(self) -> list[str]:
        """After the switch (or the removal): put the configured upgrade strategy back on the spec, then take the
        worker node group back to its size before the release's headroom (at least what the recorded workers need),
        terminating exactly the instances no Ray pod of this RayService's clusters runs on (old, new or removed
        cluster). Returns the terminated instance ids. ClusterError, with nothing terminated, while an upgrade is
        pending or while too few instances are empty (KubeRay deletes the old cluster
        ``rayClusterDeletionDelaySeconds``, 60 s by default, after the switch: run it again then)."""
        from raylift.hooks.kuberay_workers import cluster_pods
        from raylift.kuberay.manifest import to_apply_config
        from raylift.kuberay.status import upgrade_view
        from raylift.kuberay.upgrade import with_upgrade_strategy

        hook = self._kuberay()
        live = self._live()
        view = upgrade_view(live)
        if view.pending:
            raise ClusterError(f"RayService {self.namespace}/{self.rayservice_name} still has pending cluster "
                               f"{view.pending}: restore the node group after the switch or the removal. Nothing "
                               "was changed.")
        configured = self._configured_strategy()
        if (live.get("spec") or {}).get("upgradeStrategy") != configured:
            self._apply_unless_changed(hook, with_upgrade_strategy(to_apply_config(live), configured), live)
        key = self._state_key(self.HEADROOM_RECORD)
        headroom = self.state_store().read_json(key) or {}
        eks = self._eks()
        now = eks.scaling(self.cluster_name, self.worker_nodegroup).desired_size
        if not headroom:
            log.info("node group %s: no headroom recorded, left at %d node(s)", self.worker_nodegroup, now)
            return []
        target = max(int(headroom["before"]), self.nodes_for(self.recorded_workers())[0])
        if now <= target:
            self.state_store().write_json(key, {})
            return []
        record = self.blue_green_record()
        clusters = {str(name) for name in (view.active, record.get("active_before"), record.get("candidate")) if name}
        busy = {pod.host_ip: pod.name for name in sorted(clusters) for pod in cluster_pods(hook, self.namespace, name)}
        group = self._asg.capacity(self._asg_name)
        empty = sorted(i.instance_id for i in group.in_service() if i.private_ip not in busy)
        remove = now - target
        if len(empty) < remove:
            held = sorted(f"{i.instance_id} ({busy[i.private_ip]})" for i in group.in_service() if i.private_ip in busy)
            raise NodesStillHeldError(
                f"Restoring node group {self.worker_nodegroup!r} from {now} to {target} node(s) removes {remove} "
                f"instance(s), but only {len(empty)} run no Ray pod ({empty}); {held} still do. KubeRay deletes the "
                "old cluster rayClusterDeletionDelaySeconds after the switch: run this step again then. Nothing was "
                "terminated.")
        chosen = empty[:remove]
        self._asg.terminate(self._asg_name, chosen)
        eks.scale_nodegroup(self.cluster_name, self.worker_nodegroup, target)
        self.state_store().write_json(key, {})
        self._write_record(state="restored")
        log.info("node group %s restored from %d to %d node(s): terminated %s", self.worker_nodegroup, now, target,
                 ", ".join(chosen))
        return chosen

    # -- the release's interface (raylift.targets.base: cluster_change ... remove_cluster) -------------------------
    def cluster_change(self) -> str | None:
        """Whether this release's RayService spec (the serving Serve config rendered as ``apply_serve_config``
        renders it, with this release's image and options; the API server's dry-run answer) starts a new Ray
        cluster beside the live one, by KubeRay's rules (``raylift.kuberay.upgrade.starts_new_cluster``), and what
        changes. None: no RayService yet, or the running cluster takes it (or ``upgrade_strategy`` None: KubeRay
        starts none). While this release's held candidate is pending (a retried deploy step), the spec before the
        hold is what it is compared with."""
        from raylift.kuberay.status import upgrade_view
        from raylift.kuberay.upgrade import is_held, starts_new_cluster

        hook = self._kuberay()
        live = hook.get_rayservice(self.rayservice_name, self.namespace)
        if live is None:
            return None
        live_spec: Mapping[str, Any] = live.get("spec") or {}
        serving = self.current_serve_config()
        if not serving.get("applications"):
            return None  # no app serves: nothing to judge a new cluster beside (a direct deploy replaces it)
        would_be = hook.apply_rayservice(self.render(serving, self.recorded_workers()), dry_run=True)
        new_spec: Mapping[str, Any] = would_be.get("spec") or {}
        record = self.blue_green_record()
        previous = (record.get("previous") or {}).get("spec")
        if upgrade_view(live).pending and is_held(live_spec) and record.get("state") == "holding" and previous:
            live_spec = previous  # the live spec is the candidate's already: compare with what the active one runs
        if not starts_new_cluster(live_spec, new_spec):
            return None
        return f"a new rayClusterConfig ({describe_cluster_change(live_spec, new_spec)})"

    def blue_green_pair(self) -> ClusterPair:
        """(the active cluster's name, ``"pending"``). ClusterError, with nothing changed, when the hold is impossible
        (no ``gateway_class``, or ``upgrade_strategy`` None), when no cluster serves yet, or when another upgrade is
        under way (a held candidate of this release is not: a retried step gets the same pair)."""
        from raylift.kuberay.status import upgrade_view
        from raylift.kuberay.upgrade import is_held
        from raylift.targets.base import ClusterPair

        self._refuse_without_hold()
        live = self._live()
        view = upgrade_view(live)
        if not view.active:
            raise ClusterError(f"RayService {self.namespace}/{self.rayservice_name} has no active cluster yet "
                               f"({view.describe()}): nothing serves to release beside. Deploy it with release: "
                               "direct first. Nothing was changed.")
        if view.pending and (view.rolling_back or not is_held(live.get("spec") or {})):
            raise ClusterError(f"RayService {self.namespace}/{self.rayservice_name} is upgrading already (pending "
                               f"cluster {view.pending}, {view.describe()}): wait for KubeRay to finish it, then "
                               "release again. Nothing was changed.")
        return ClusterPair(serving=view.active, candidate=CANDIDATE)

    def _refuse_without_hold(self) -> None:
        if self.upgrade_strategy == "None":
            raise ClusterError(
                f"RayService {self.namespace}/{self.rayservice_name}: a blue/green release on EKS needs KubeRay to "
                "start a second cluster, which upgrade_strategy 'None' never does. Set the eks target option "
                "'upgrade_strategy' to 'NewCluster' (with 'gateway_class'), or release: direct. Nothing was changed.")
        if not self.gateway_class:
            raise ClusterError(
                f"RayService {self.namespace}/{self.rayservice_name}: this release needs a new Ray cluster, released "
                "blue/green on EKS (held beside the serving one until the gate promotes it). That needs the eks "
                "target option 'gateway_class' (a GatewayClass of a Gateway API controller running in the cluster): "
                "KubeRay (v1.7) switches a NewCluster upgrade as soon as its Serve apps run, and raylift holds that "
                "switch with KubeRay's incremental upgrade at stepSizePercent 0, for which KubeRay builds a Gateway "
                "and HTTPRoute from that GatewayClass. Set 'gateway_class', or release: direct (KubeRay's own upgrade "
                "replaces the cluster and switches to it as soon as it is healthy, before any gate judged it). "
                "Nothing was changed.")

    def on_cluster(self, cluster: str) -> Any:
        """A copy of this target bound to one cluster of the pair. ``"pending"``: the candidate, whose config write
        is ``hold_candidate``, deploy wait ``candidate_trigger`` and endpoint ``eks_candidate_endpoint``
        (``current_serve_config`` stays the RayService's, read the same way twice); any other name: that
        cluster's own Serve Service (KubeRay's ``<cluster>-serve-svc``) as its endpoint, so the serving arm is
        measured on its own cluster as the candidate is. The binding shadows those methods on the copy."""
        import copy

        bound = copy.copy(self)
        for method in _BOUND_METHODS:  # a copy of a bound copy starts from the target's own methods
            bound.__dict__.pop(method, None)
        if cluster == CANDIDATE:
            bound.__dict__.update(apply_serve_config=bound._write_candidate,
                                  deploy_trigger=bound._candidate_deploy_trigger,
                                  endpoint_url=bound.eks_candidate_endpoint)
        else:
            self._check_cluster_name(cluster)
            bound.__dict__["endpoint_url"] = lambda: bound.arm_url(cluster)
        return bound

    def _write_candidate(self, config: dict[str, Any]) -> None:
        self.hold_candidate(config)

    def _candidate_deploy_trigger(self, *, app_names: list[str], timeout_s: float,
                                  optional: bool = False) -> RayServiceUpgradeTrigger:
        return self.candidate_trigger(app_names=app_names, timeout_s=timeout_s)

    def _check_cluster_name(self, cluster: str) -> None:
        if not cluster or "/" in cluster or cluster != cluster.strip():
            raise ClusterError(f"{cluster!r} names no Ray cluster of RayService {self.namespace}/"
                               f"{self.rayservice_name}: give the active cluster's name (its status), or {CANDIDATE!r}.")

    def start_cluster(self, cluster: str, *, workers: int) -> None:
        """Nothing starts before the candidate's config is written: KubeRay creates the pending cluster when
        ``hold_candidate`` applies the spec (with as many workers as the RayService runs, ``recorded_workers``;
        ``workers`` is not used). Checked here, with nothing changed: ``cluster`` is ``"pending"`` and the hold is
        possible (``blue_green_pair``)."""
        if cluster != CANDIDATE:
            raise ClusterError(f"On EKS a blue/green release starts the pending cluster ({CANDIDATE!r}), not "
                               f"{cluster!r}: a cluster that serves is never restarted. Nothing was changed.")
        serving = self.blue_green_pair().serving
        log.info("RayService %s/%s: the pending cluster starts beside %s when the release writes its config "
                 "(%d worker(s), as recorded; %d asked)", self.namespace, self.rayservice_name, serving,
                 self.recorded_workers(), workers)

    def switch_endpoint(self, to: str, *, timeout_s: float | None = None) -> None:
        """``promote_candidate``, then wait for KubeRay's switch (``promotion_trigger``). A retried step whose
        earlier try promoted already just waits. ClusterError when the switch does not happen in time (the
        rollback step removes the candidate while it is still pending)."""
        from raylift.kuberay.status import upgrade_view

        if to != CANDIDATE:
            raise ClusterError(f"On EKS the endpoint switches to the pending cluster ({CANDIDATE!r}), not {to!r}.")
        record = self.blue_green_record()
        view = upgrade_view(self._live())
        if not view.pending and record.get("state") == "promoting" and record.get("candidate") == view.active:
            candidate = view.active  # an earlier try promoted it, and KubeRay switched
        else:
            candidate = self.promote_candidate()
        event = self.promotion_trigger(candidate, timeout_s=self._switch_timeout_s(timeout_s)).wait()
        if event.get("status") != "success":
            raise ClusterError(f"KubeRay did not switch RayService {self.namespace}/{self.rayservice_name} to "
                               f"{candidate}: {event.get('message')}. Users stay where the status says "
                               f"({event.get('view', 'unknown')}).")

    def _switch_timeout_s(self, deploy_timeout_s: float | None) -> float:
        """How long the switch may take: the run's deploy wait (``deploy_timeout_s``: growing the candidate may need
        new nodes pulling the image; the default where the release recorded none), plus an incremental upgrade's
        traffic steps."""
        from raylift.config import DEPLOY_TIMEOUT_S

        options = self._configured_strategy().get("clusterUpgradeOptions") or {}
        steps = math.ceil(100 / max(int(options.get("stepSizePercent") or 100), 1)) if options else 0
        base = DEPLOY_TIMEOUT_S if deploy_timeout_s is None else deploy_timeout_s
        return float(base) + steps * float(options.get("intervalSeconds") or 0)

    def retire_cluster(self, cluster: str) -> str:
        """After the switch: KubeRay deletes ``cluster`` itself (``rayClusterDeletionDelaySeconds`` after it);
        the node group is restored once that cluster's nodes are free (``restore_node_groups``, retried)."""
        from raylift.kuberay.status import upgrade_view

        view = upgrade_view(self._live())
        if cluster in (CANDIDATE, view.active) or view.pending:
            raise ClusterError(f"Cluster {cluster!r} of RayService {self.namespace}/{self.rayservice_name} is not "
                               f"retired: the switch has not happened ({view.describe()}). Nothing was changed.")
        self._remove_arm_routes()
        return f"KubeRay deletes the old cluster {cluster}; {self._restore_retried()}"

    def remove_cluster(self, cluster: str, *, timeout_s: float | None = None) -> str:
        """A rejected candidate: ``remove_candidate`` (KubeRay's rollback; the active cluster untouched), its wait
        (``removal_trigger``), then the node group restored (retried). Where this release applied no hold (it
        failed before), only the node group is restored."""
        if cluster != CANDIDATE:
            raise ClusterError(f"On EKS a blue/green release removes the pending cluster ({CANDIDATE!r}), never "
                               f"{cluster!r}. Nothing was changed.")
        self._remove_arm_routes()
        if self.blue_green_record().get("state") not in ("holding", "promoting", "removing"):
            return f"no candidate cluster was started; {self._restore_retried()}"
        candidate = self.remove_candidate()
        if candidate:
            event = self.removal_trigger(candidate, timeout_s=self._switch_timeout_s(timeout_s)).wait()
            if event.get("status") != "success":
                raise ClusterError(f"KubeRay did not remove pending cluster {candidate} of RayService "
                                   f"{self.namespace}/{self.rayservice_name}: {event.get('message')}. The active "
                                   "cluster serves, its spec as before the release; run the rollback again.")
        return f"the candidate cluster {candidate or '(none started)'} removed by KubeRay; {self._restore_retried()}"

    def _sleep(self, seconds: float) -> None:
        """Between tries of ``restore_node_groups`` (a seam for tests: KubeRay acts meanwhile)."""
        time.sleep(seconds)

    def _restore_retried(self) -> str:
        """``restore_node_groups`` until the old (or removed) cluster's pods left enough nodes: KubeRay deletes it
        ``rayClusterDeletionDelaySeconds`` after it stopped serving, so tried for that long plus a margin, every
        ``poll_interval_s``. Says what was done."""
        from tenacity import (
            Retrying,
            retry_if_exception_type,
            stop_after_attempt,
            stop_after_delay,
            wait_fixed,
        )

        delay = float((self._live().get("spec") or {}).get("rayClusterDeletionDelaySeconds", DELETION_DELAY_S))
        bound = delay + RESTORE_MARGIN_S
        before = self._eks().scaling(self.cluster_name, self.worker_nodegroup).desired_size
        terminated: list[str] = []
        tries = math.ceil(bound / self.poll_interval_s) + 1  # a sleep that does not sleep (a test) stops too
        for attempt in Retrying(stop=stop_after_delay(bound) | stop_after_attempt(tries),
                                wait=wait_fixed(self.poll_interval_s), sleep=self._sleep, reraise=True,
                                retry=retry_if_exception_type(NodesStillHeldError)):
            with attempt:
                terminated = self.restore_node_groups()
        after = self._eks().scaling(self.cluster_name, self.worker_nodegroup).desired_size
        if not terminated:
            return f"node group {self.worker_nodegroup} left at {after} node(s) (no headroom to give back)"
        return (f"node group {self.worker_nodegroup} back from {before} to {after} node(s) (instances "
                f"{', '.join(terminated)} terminated)")


# the methods ``on_cluster`` shadows on its copy
_BOUND_METHODS = ("apply_serve_config", "deploy_trigger", "endpoint_url")


def is_gateway_ready(gateway: Mapping[str, Any] | None) -> bool:
    """KubeRay's ``utils.IsGatewayReady`` (v1.7.0, ray-operator/controllers/ray/utils/util.go): the Gateway's
    ``Accepted`` and ``Programmed`` conditions both True."""
    conditions = {c.get("type"): c.get("status") for c in ((gateway or {}).get("status") or {}).get("conditions") or []}
    return conditions.get("Accepted") == "True" and conditions.get("Programmed") == "True"


def is_httproute_ready(gateway: Mapping[str, Any], route: Mapping[str, Any] | None) -> bool:
    """KubeRay's ``utils.IsHTTPRouteReady`` (same file): the route's ``status.parents`` entry for ``gateway`` has
    ``Accepted`` and ``ResolvedRefs`` True."""
    meta = gateway.get("metadata") or {}
    for parent in ((route or {}).get("status") or {}).get("parents") or []:
        ref = parent.get("parentRef") or {}
        if ref.get("name") != meta.get("name") or ref.get("namespace") not in (None, meta.get("namespace")):
            continue
        conditions = {c.get("type"): c.get("status") for c in parent.get("conditions") or []}
        if conditions.get("Accepted") == "True" and conditions.get("ResolvedRefs") == "True":
            return True
    return False


def gateway_address(gateway: Mapping[str, Any] | None) -> str:
    """The Gateway's first ``status.addresses`` value (a hostname for an NLB), or ""."""
    addresses = ((gateway or {}).get("status") or {}).get("addresses") or []
    return str(addresses[0].get("value") or "") if addresses else ""


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address  # an IPv6 address in a URL


def arm_route(rayservice: str, namespace: str, cluster: str, gateway: str, port: int) -> dict[str, Any]:
    """The HTTPRoute that sends ``/raylift-arm/<cluster>/...`` on ``gateway`` to that cluster's Serve Service only
    (Gateway API v1: a ``PathPrefix`` match, a ``URLRewrite`` filter with ``ReplacePrefixMatch`` "/")."""
    name = f"{rayservice}-arm-{cluster}"[:253]
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "raylift", "ray.io/cluster": cluster}},
            "spec": {"parentRefs": [{"name": gateway, "namespace": namespace}],
                     "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": f"{ARM_PREFIX}/{cluster}"}}],
                                "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {
                                    "type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
                                "backendRefs": [{"name": f"{cluster}-serve-svc", "port": port}]}]}}


def describe_cluster_change(old_spec: Mapping[str, Any], new_spec: Mapping[str, Any]) -> str:
    """What differs between two RayService specs' ``rayClusterConfig`` as KubeRay hashes it: the images, the Ray
    version, else the parts that differ."""
    from raylift.kuberay.upgrade import _hashed

    old, new = _hashed(old_spec.get("rayClusterConfig")), _hashed(new_spec.get("rayClusterConfig"))
    parts = []
    old_images, new_images = _images(old), _images(new)
    if old_images != new_images:
        parts.append(f"image {', '.join(old_images) or '-'} -> {', '.join(new_images) or '-'}")
    if old.get("rayVersion") != new.get("rayVersion"):
        parts.append(f"rayVersion {old.get('rayVersion')} -> {new.get('rayVersion')}")
    if not parts:
        parts.append(", ".join(sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))) + " changed")
    return "; ".join(parts)


def _images(cluster_config: Mapping[str, Any]) -> list[str]:
    groups = [cluster_config.get("headGroupSpec") or {}, *(cluster_config.get("workerGroupSpecs") or [])]
    return sorted({str(c.get("image")) for g in groups
                   for c in ((g.get("template") or {}).get("spec") or {}).get("containers") or [] if c.get("image")})
