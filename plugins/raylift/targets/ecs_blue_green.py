"""A blue/green release on ECS: a second pair of services (green) beside the serving one (blue), the endpoint moved
to green only once it runs, then blue retired, or green removed when the release is rejected.

Why: an in-place image rollout (``EcsTarget.roll_out_image``) replaces every task of the head and worker services,
and with ``deployment_minimum_healthy_percent = 0`` that is an outage. Here blue is never updated, stopped or
deleted before ``switch_to_green``, so a rejected release leaves what served as it was.

The pairs alternate: green is ``<head_service>-green``/``<worker_service>-green`` while the options' pair is
active, and the options' pair again once a release made the ``-green`` pair active. Which pair is active is kept in
the state store (``_raylift/<cluster>/ecs_blue_green.json``) with the last plan, so a retried step resumes it.

Each pair's head registers in its own Cloud Map service (``cloud_map_service``, ``<cloud_map_service>-green``), and
each pair's workers join their own head (``RAY_HEAD_ADDRESS``). The user endpoint is a raylift-owned Cloud Map
service (target option ``endpoint_cloud_map_service``) with one custom instance, re-registered with green's head
IP at the switch, and with the serving head's at each ready check (``ensure_endpoint``); deregistered at a teardown.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from raylift.errors import ClusterCapacityError, ClusterError, RayliftValueError

if TYPE_CHECKING:
    from raylift.hooks.ecs_service import ContainerCapacity, EcsServiceHook, TaskResources
    from raylift.store import ObjectStore
    from raylift.targets.base import ClusterPair
    from raylift.triggers.ecs import EcsServicesStableTrigger

log = logging.getLogger(__name__)
GREEN_SUFFIX = "-green"
SURGES = ("auto", "none")
ENDPOINT_INSTANCE = "raylift-endpoint"  # the one custom instance of the endpoint's Cloud Map service
HEAD_ADDRESS_ENV = "RAY_HEAD_ADDRESS"  # the workers' `ray start --address` (terraform's worker command reads it)
_KEY_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class GreenPlan:
    """What a blue/green release starts, and beside what: JSON-able (``as_dict``/``from_dict``) for XCom and the
    state store. ``head_revision``/``worker_revision`` are the task-definition revisions green runs: the image on
    blue's task definitions (``*_from``), registered by ``start_green`` (None until then)."""

    cluster: str
    blue_head: str
    blue_worker: str
    green_head: str
    green_worker: str
    green_discovery: str  # the Cloud Map service green's head registers in
    image: str
    head_from: str  # blue's task-definition revisions green's are made from
    worker_from: str
    workers: int  # green's worker tasks: blue's worker desiredCount
    surge: str = "auto"
    outage: bool = False  # surge "none": no capacity check, an announced outage
    head_revision: str | None = None
    worker_revision: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GreenPlan:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


class EcsBlueGreen:
    """Mixed into ``EcsTarget`` (whose attributes it uses): the ECS half of a blue/green release."""

    cluster: str
    cloud_map_namespace: str | None
    serve_port: int
    endpoint: str | None
    _services: tuple[str, str, str] | None
    scale_poll_interval_s: float
    scale_timeout_s: float
    options: Any
    aws: Any
    BLUE_GREEN_RECORD: ClassVar[str] = "ecs_blue_green.json"

    if TYPE_CHECKING:

        @property
        def _rollout_store(self) -> ObjectStore: ...

        def _ecs(self) -> EcsServiceHook: ...

        def cluster_key(self) -> str: ...

        def image_reference(self) -> str: ...

        def _pair(self) -> tuple[str, str, str]: ...

        def serves_nothing(self) -> bool: ...

    # -- the state store record --------------------------------------------------------------------
    def _blue_green_key(self) -> str:
        return f"_raylift/{_KEY_SAFE.sub('_', self.cluster_key())}/{self.BLUE_GREEN_RECORD}"

    def blue_green_record(self) -> dict[str, Any]:
        """``{"active": {"head", "worker"}, "state", "plan", "at"}``, or {} before any blue/green release."""
        record: dict[str, Any] | None = self._rollout_store.read_json(self._blue_green_key())
        return record or {}

    def _write_record(self, plan: GreenPlan, state: str, active: tuple[str, str]) -> None:
        record = {"active": {"head": active[0], "worker": active[1]}, "state": state, "plan": plan.as_dict(),
                  "at": datetime.now(UTC).isoformat()}  # fmt: skip
        self._rollout_store.write_json(self._blue_green_key(), record)

    def active_pair(self, record: dict[str, Any] | None = None) -> tuple[str, str]:
        """The (head, worker) services that serve: the options' pair unless a blue/green release switched
        (``record``: :meth:`blue_green_record`'s, when the caller read it already)."""
        active = (self.blue_green_record() if record is None else record).get("active") or {}
        opts = self.options
        return str(active.get("head") or opts.head_service), str(active.get("worker") or opts.worker_service)

    def _discovery_name(self, head: str) -> str:
        """The Cloud Map service a pair's head registers in: ``cloud_map_service``, ``-green`` for the green pair."""
        opts = self.options
        return str(opts.cloud_map_service) + (GREEN_SUFFIX if head == opts.head_service + GREEN_SUFFIX else "")

    # -- 1. plan -----------------------------------------------------------------------------------
    def green_plan(self, image: str | None = None, *, surge: str = "auto") -> GreenPlan:
        """Name blue (the active pair), green (the other pair) and what green runs, after checking that green fits
        on the cluster beside blue (``surge="auto"``; ClusterCapacityError naming the numbers otherwise). With
        ``surge="none"`` the check is skipped: green may start only once blue is gone, an announced outage."""
        if surge not in SURGES:
            raise RayliftValueError(f"surge must be one of {list(SURGES)} (got {surge!r}).")
        if not self.cloud_map_namespace:
            raise RayliftValueError(
                "A blue/green release on ECS needs the target option 'cloud_map_namespace': each pair's head "
                "registers in its own Cloud Map service and the endpoint is one too."
            )
        from raylift.hooks.ecs_service import image_repository

        ecs = self._ecs()
        blue_head, blue_worker = self.active_pair()
        opts = self.options
        base = blue_head == opts.head_service
        green_head, green_worker = (
            (opts.head_service + GREEN_SUFFIX, opts.worker_service + GREEN_SUFFIX)
            if base else (opts.head_service, opts.worker_service)
        )  # fmt: skip
        head, worker = self._blue_service(ecs, blue_head), self._blue_service(ecs, blue_worker)
        ref = image or self.image_reference()
        plan = GreenPlan(
            cluster=self.cluster, blue_head=blue_head, blue_worker=blue_worker, green_head=green_head,
            green_worker=green_worker, green_discovery=self._discovery_name(green_head), image=ref,
            head_from=str(head["taskDefinition"]), worker_from=str(worker["taskDefinition"]),
            workers=int(worker.get("desiredCount") or 0), surge=surge, outage=surge == "none",
        )  # fmt: skip
        worker_td = ecs.task_definition(plan.worker_from)
        from raylift.hooks.ecs_service import container_env

        if container_env(worker_td, image_repository(ref), HEAD_ADDRESS_ENV) is None:
            raise ClusterError(
                f"The worker task definition {plan.worker_from} sets no {HEAD_ADDRESS_ENV} in its Ray container, so "
                f"green's workers would join blue's head: apply the terraform module ecs_ray (its workers read "
                f"{HEAD_ADDRESS_ENV}), or release with an in-place rollout."
            )
        if plan.outage:
            log.warning(
                "ANNOUNCED OUTAGE: blue/green release on ECS %r with surge 'none': no capacity check; green (%s, %s) "
                "may start only once blue (%s, %s) is scaled in, and the endpoint is down in between",
                self.cluster, green_head, green_worker, blue_head, blue_worker,
            )
        else:
            self._check_capacity(ecs, plan, head, worker, worker_td)
        return plan

    def _blue_service(self, ecs: EcsServiceHook, name: str) -> dict[str, Any]:
        """DescribeServices of a blue service (with its tags); ClusterError when it does not exist."""
        found = ecs.describe_service(self.cluster, name)
        if found is None:
            raise ClusterError(
                f"ECS cluster {self.cluster!r} has no active service {name!r} (blue, the pair that serves): check "
                f"the target options and the state-store record {self._blue_green_key()}."
            )
        return found

    # -- capacity ----------------------------------------------------------------------------------
    def _check_capacity(
        self, ecs: EcsServiceHook, plan: GreenPlan, head: dict[str, Any], worker: dict[str, Any],
        worker_td: dict[str, Any],
    ) -> None:
        """First-fit green's tasks (head first, then workers, each where its service's capacity providers place
        it) on what the container instances have left beside blue, then on the instances their Auto Scaling groups
        can still launch (MaxSize over current instances, each sized like one of the group's). ClusterCapacityError
        when one does not fit."""
        from raylift.hooks.ecs_service import task_resources

        if "FARGATE" in {head.get("launchType"), worker.get("launchType")}:
            log.info("blue/green on ECS %r: Fargate services need no cluster capacity check", self.cluster)
            return
        instances = ecs.container_capacity(self.cluster)
        free: dict[str, TaskResources] = {i.arn: i.remaining for i in instances}
        pools: dict[str, list[str]] = {}
        growth: list[str] = []
        for role, service in (("head", head), ("worker", worker)):
            pools[role], notes = self._pool(ecs, service, instances, free)
            growth += [n for n in notes if n not in growth]  # head and workers may share a group
        demand = [("head", task_resources(ecs.task_definition(plan.head_from)))]
        demand += [("worker", task_resources(worker_td))] * plan.workers
        unplaced = [(role, need) for role, need in demand if not _place(need, pools[role], free)]
        if not unplaced:
            return
        needed = _sum(need for _, need in demand)
        have = _sum(i.remaining for i in instances)
        per_task = "; ".join(f"{role} task {need}" for role, need in dict(demand).items())
        raise ClusterCapacityError(
            f"Green ({plan.green_head} 1 task + {plan.green_worker} {plan.workers} task(s)) does not fit on ECS "
            f"cluster {self.cluster!r} beside blue ({plan.blue_head}, {plan.blue_worker}): it needs {needed} "
            f"({per_task}); the {len(instances)} container instance(s) have {have} free, "
            f"{'; '.join(growth) or 'and no Auto Scaling group can grow'}; {len(unplaced)} of {len(demand)} task(s) "
            "find no room. Raise the capacity providers' Auto Scaling group MaxSize (terraform module ecs_ray: "
            "blue_green_surge = true), free instances, or release with surge 'none' (an announced outage). "
            "Nothing was started."
        )

    def _pool(
        self, ecs: EcsServiceHook, service: dict[str, Any], instances: list[ContainerCapacity],
        free: dict[str, TaskResources],
    ) -> tuple[list[str], list[str]]:
        """The container instances (ARNs, instances to launch last) a service's tasks can go to, and notes on
        each Auto Scaling group's room to grow. A headroom instance is added to ``free``, sized like the group's."""
        from raylift.hooks.autoscaling_group import AutoScalingGroupHook

        providers = [s["capacityProvider"] for s in service.get("capacityProviderStrategy") or []]
        groups = {p: g for p, g in ecs.capacity_provider_groups(providers).items() if g}
        if not groups:
            return [i.arn for i in instances], []
        asg = AutoScalingGroupHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)
        pool: list[str] = []
        notes: list[str] = []
        for provider, group in sorted(groups.items()):
            capacity = asg.capacity(group)
            members = {i.instance_id for i in capacity.instances}
            mine = [i for i in instances if i.ec2_instance_id in members]
            pool += [i.arn for i in mine if i.arn not in pool]
            room = max(0, capacity.max_size - len(capacity.instances))
            if room and not mine:
                notes.append(f"Auto Scaling group {group} could launch {room} instance(s) but has none to size them by")
                continue
            notes.append(f"Auto Scaling group {group} ({provider}) can launch {room} more (MaxSize "
                         f"{capacity.max_size}, {len(capacity.instances)} running)")  # fmt: skip
            for n in range(room):
                key = f"{group}#new-{n}"
                if key not in free:
                    free[key] = mine[0].registered
                pool.append(key)
        return pool, notes

    # -- 2. start ----------------------------------------------------------------------------------
    def start_green(self, plan: GreenPlan) -> None:
        """Register green's task-definition revisions (the plan's image; the workers' ``RAY_HEAD_ADDRESS`` on green's
        head), record the plan, then create green's head and worker services as copies of blue's. A retry resumes:
        the recorded revisions are reused and an existing green service is kept. Blue is not touched."""
        from raylift.hooks.ecs_service import container_env, image_repository
        from raylift.hooks.service_discovery import CloudMapHook

        ecs = self._ecs()
        self._refuse_when_active(plan, "start green")
        recorded = self.blue_green_record().get("plan") or {}
        same = {k: recorded.get(k) for k in ("green_head", "green_worker", "image")} == {
            "green_head": plan.green_head, "green_worker": plan.green_worker, "image": plan.image}  # fmt: skip
        if same and recorded.get("head_revision") and recorded.get("worker_revision"):
            plan = GreenPlan.from_dict(recorded)
        else:
            repo = image_repository(plan.image)
            blue_address = container_env(ecs.task_definition(plan.worker_from), repo, HEAD_ADDRESS_ENV) or ""
            port = blue_address.rsplit(":", 1)[1] if ":" in blue_address else "6379"
            green_address = f"{plan.green_discovery}.{self.cloud_map_namespace}:{port}"
            head_rev = ecs.revisions_with_image([plan.head_from], repo, plan.image)[plan.head_from]
            worker_rev = ecs.revisions_with_image(
                [plan.worker_from], repo, plan.image, {HEAD_ADDRESS_ENV: green_address}
            )[plan.worker_from]
            plan = dataclasses.replace(plan, head_revision=head_rev, worker_revision=worker_rev)
        self._write_record(plan, "starting", (plan.blue_head, plan.blue_worker))
        assert plan.head_revision and plan.worker_revision  # set just above, or by the recorded try
        cloud_map = CloudMapHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)
        _, registry = cloud_map.service_ids(self.cloud_map_namespace or "", plan.green_discovery)
        blue_head = self._blue_service(ecs, plan.blue_head)
        blue_worker = self._blue_service(ecs, plan.blue_worker)
        ecs.create_service_like(self.cluster, plan.green_head, blue_head, plan.head_revision, 1, registry)
        ecs.create_service_like(self.cluster, plan.green_worker, blue_worker, plan.worker_revision, plan.workers, None)
        log.info("blue/green on ECS %r: green %s + %s started beside blue %s + %s", self.cluster,
                 plan.green_head, plan.green_worker, plan.blue_head, plan.blue_worker)  # fmt: skip

    # -- 3. wait -----------------------------------------------------------------------------------
    def green_ready_trigger(self, plan: GreenPlan) -> EcsServicesStableTrigger:
        """Defer until green's two services are stable (boto's ``services_stable``: one deployment each, running
        its desired count); whether Ray on green is whole is asked afterwards."""
        from raylift.triggers.base import attempts_for
        from raylift.triggers.ecs import EcsServicesStableTrigger

        return EcsServicesStableTrigger(
            self.cluster,
            [plan.green_head, plan.green_worker],
            waiter_delay=self.scale_poll_interval_s,
            waiter_max_attempts=attempts_for(self.scale_timeout_s, self.scale_poll_interval_s),
            aws_conn_id=self.aws.aws_conn_id,
            region_name=self.aws.region_name,
        )

    # -- 4. switch ---------------------------------------------------------------------------------
    def switch_to_green(self, plan: GreenPlan) -> None:
        """Point the endpoint's Cloud Map instance at green's head task, then record green as the active pair.
        The only step that moves users: before it, everything served from blue."""
        from raylift.hooks.service_discovery import CloudMapHook

        endpoint = self.options.endpoint_cloud_map_service
        if not endpoint:
            raise RayliftValueError(
                "switch_to_green needs the target option 'endpoint_cloud_map_service' (the terraform module ecs_ray's "
                "output endpoint_cloud_map_service): without it the endpoint is blue's head, which green cannot take over."
            )
        ecs = self._ecs()
        tasks = ecs.service_task_ips(self.cluster, plan.green_head)
        ips = sorted(ip for found in tasks.values() for ip in found)
        if len(tasks) != 1 or not ips:
            raise ClusterError(
                f"Green's head service {self.cluster}/{plan.green_head} runs {len(tasks)} task(s) with IP(s) {ips}, "
                "not one: the endpoint stays on blue. Wait for green_ready_trigger's success, then switch again."
            )
        cloud_map = CloudMapHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)
        service_id, _ = cloud_map.service_ids(self.cloud_map_namespace or "", endpoint)
        cloud_map.register_endpoint(service_id, ENDPOINT_INSTANCE, ips[0], self.serve_port)
        self._write_record(plan, "switched", (plan.green_head, plan.green_worker))
        log.warning("blue/green on ECS %r: endpoint %s.%s now on green %s (%s:%d)", self.cluster, endpoint,
                    self.cloud_map_namespace, plan.green_head, ips[0], self.serve_port)  # fmt: skip

    # -- 5. end ------------------------------------------------------------------------------------
    def retire_blue(self, plan: GreenPlan) -> None:
        """After the switch: scale blue's workers to 0, then its head, and delete both services."""
        active = self.active_pair()
        if active != (plan.green_head, plan.green_worker):
            raise ClusterError(
                f"Blue ({plan.blue_head}, {plan.blue_worker}) on ECS {self.cluster!r} still serves (active pair "
                f"{active}): retire_blue runs only after switch_to_green. Nothing was changed."
            )
        self._take_down(plan.blue_head, plan.blue_worker)
        self._write_record(plan, "retired", active)

    def remove_green(self, plan: GreenPlan) -> None:
        """A rejected release: scale green to 0 and delete its services; blue, which still serves, is not touched."""
        self._refuse_when_active(plan, "remove green")
        self._take_down(plan.green_head, plan.green_worker)
        self._write_record(plan, "removed", (plan.blue_head, plan.blue_worker))

    def _take_down(self, head: str, worker: str) -> None:
        ecs = self._ecs()
        for service in (worker, head):
            if ecs.describe_service(self.cluster, service) is not None:
                ecs.scale_service(self.cluster, service, 0)
        for service in (worker, head):
            ecs.delete_service(self.cluster, service)

    def ensure_endpoint(self) -> None:
        """Point the user endpoint's Cloud Map instance (``endpoint_cloud_map_service``) at the serving head's task
        IP: registered on the first ready check, moved when the head is another task since (a scale-up after a
        teardown, an in-place image rollout, ECS replacing a head that died), left alone when it answers with it
        already. Nothing without the option. Called by every ready check (``check_ready``), so the endpoint follows
        the head from one run to the next; a head ECS replaces between runs is followed at the next run's check."""
        from raylift.hooks.service_discovery import CloudMapHook

        endpoint = self.options.endpoint_cloud_map_service
        if not endpoint or not self.cloud_map_namespace:
            return
        head, _ = self.active_pair()
        ips = sorted(ip for found in self._ecs().service_task_ips(self.cluster, head).values() for ip in found)
        if len(ips) != 1:
            log.warning("head service %s runs %d task IP(s) %s: the endpoint %s.%s is left as it is", head, len(ips),
                        ips, endpoint, self.cloud_map_namespace)
            return
        cloud_map = CloudMapHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)
        was = cloud_map.registered_ip(self.cloud_map_namespace, endpoint, ENDPOINT_INSTANCE)
        if was == ips[0]:
            return
        service_id, _ = cloud_map.service_ids(self.cloud_map_namespace, endpoint)
        cloud_map.register_endpoint(service_id, ENDPOINT_INSTANCE, ips[0], self.serve_port)
        log.warning("the endpoint %s.%s now answers with the serving head %s (%s:%d; was %s)", endpoint,
                    self.cloud_map_namespace, head, ips[0], self.serve_port, was or "unregistered")

    def drop_endpoint(self) -> None:
        """Deregister the user endpoint's instance (a teardown): its name answers nothing rather than a head that is
        gone, until the next ready check registers the next one. Nothing without ``endpoint_cloud_map_service``."""
        from raylift.hooks.service_discovery import CloudMapHook

        endpoint = self.options.endpoint_cloud_map_service
        if not endpoint or not self.cloud_map_namespace:
            return
        cloud_map = CloudMapHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)
        service_id, _ = cloud_map.service_ids(self.cloud_map_namespace, endpoint)
        if cloud_map.deregister_endpoint(service_id, ENDPOINT_INSTANCE):
            log.warning("the endpoint %s.%s deregistered: its head was torn down", endpoint, self.cloud_map_namespace)

    # -- the release's interface (raylift.targets.base: cluster_change ... remove_cluster) -------------------------
    def cluster_change(self) -> str | None:
        """The serving pair's Ray container runs another image than this release's (``image_reference``): read
        only (no revision is registered). None where the target does not roll images out."""
        from raylift.hooks.ecs_service import image_repository

        if not getattr(self, "rolls_out_image", False):
            return None
        ref = self.image_reference()
        repo, ecs = image_repository(ref), self._ecs()
        serving = [self._pair()[0], self._pair()[1]]  # the pair this task drives: the serving one, read once
        for service, arn in sorted(ecs.service_task_definitions(self.cluster, serving).items()):
            images = [str(c.get("image")) for c in ecs.task_definition(arn).get("containerDefinitions") or []
                      if image_repository(str(c.get("image", ""))) == repo]
            if images and ref not in images:
                if self.serves_nothing():  # nothing to protect: never blue/green (raylift.release.plan)
                    log.warning("ECS %r serves no app: the new image (%s -> %s) is not released blue/green; the scale "
                                "step rolls it in place", self.cluster, images[0], ref)
                    return None
                return f"a new image ({images[0]} -> {ref}, service {service})"
        return None

    def blue_green_pair(self) -> ClusterPair:
        from raylift.targets.base import ClusterPair

        if not self.options.endpoint_cloud_map_service or not self.cloud_map_namespace:
            raise ClusterError(
                "A new image on ECS is released blue/green: a second service pair beside the serving one, and the "
                "endpoint's Cloud Map name moved to it on promote. Set the target options 'cloud_map_namespace' and "
                "'endpoint_cloud_map_service' (terraform module ecs_ray's output endpoint_cloud_map_service), or "
                "release: direct (the services are rolled in place: an announced outage). Nothing was changed.")
        record = self.blue_green_record()
        head, _ = self.active_pair(record)
        plan = GreenPlan.from_dict(record["plan"]) if record.get("plan") else None
        if plan is not None and plan.blue_head == head and record.get("state") == "starting":
            return ClusterPair(serving=head, candidate=plan.green_head)  # a retried step: the pair it started
        opts = self.options
        other = opts.head_service if head != opts.head_service else opts.head_service + GREEN_SUFFIX
        return ClusterPair(serving=head, candidate=other)

    def _recorded_plan(self) -> GreenPlan | None:
        recorded = self.blue_green_record().get("plan")
        return GreenPlan.from_dict(recorded) if recorded else None

    def _plan_for(self, *, green: str | None = None, blue: str | None = None) -> GreenPlan:
        plan = self._recorded_plan()
        if plan is None or (green and plan.green_head != green) or (blue and plan.blue_head != blue):
            raise ClusterError(f"no blue/green plan recorded for ECS {self.cluster!r} with green {green or '?'} and "
                               f"blue {blue or '?'} (the record has {plan and (plan.blue_head, plan.green_head)})")
        return plan

    def on_cluster(self, cluster: str) -> Any:
        """This target on the pair whose head service is ``cluster``: its Ray dashboard and Serve port, through
        its own Cloud Map service (not the user endpoint)."""
        import copy

        opts = self.options
        worker = opts.worker_service + ("" if cluster == opts.head_service else GREEN_SUFFIX)
        bound = copy.copy(self)
        bound._services = (cluster, worker, self._discovery_name(cluster))
        bound.endpoint = None
        return bound

    def start_cluster(self, cluster: str, *, workers: int) -> None:
        """Plan green (capacity checked unless ``blue_green_surge`` is none), start it, wait until ECS runs it and
        its Ray dashboard answers. ``workers``: green gets blue's worker count (the plan reads it from ECS)."""
        import time

        plan = self.green_plan(surge=self.options.blue_green_surge)
        if plan.green_head != cluster:
            raise ClusterError(f"ECS's next green pair is {plan.green_head}, not {cluster}")
        self.start_green(plan)  # resumes a recorded try of the same plan
        from raylift.triggers.base import attempts_for

        self._ecs().wait_for_services(  # green's services are new: one deployment each, at its desired count
            self.cluster, [plan.green_head, plan.green_worker], waiter_delay=self.scale_poll_interval_s,
            waiter_max_attempts=attempts_for(self.scale_timeout_s, self.scale_poll_interval_s))
        dashboard = self.on_cluster(cluster)._dashboard()
        deadline = time.monotonic() + self.scale_timeout_s
        while not dashboard.is_up():
            if time.monotonic() > deadline:
                raise ClusterError(f"green's Ray dashboard ({dashboard.address}) did not answer in "
                                   f"{self.scale_timeout_s:.0f} s. The rollback step removes green; blue serves.")
            time.sleep(self.scale_poll_interval_s)

    def switch_endpoint(self, to: str, *, timeout_s: float | None = None) -> None:
        """Cloud Map re-pointed at green's head (``switch_to_green``): no wait, so ``timeout_s`` bounds nothing."""
        self.switch_to_green(self._plan_for(green=to))

    def drain_trigger(self, cluster: str) -> Any:
        """The wait before ``cluster`` (blue, just switched away from) is retired: until its head's Serve proxy
        carries no request, at least ``endpoint_drain_s`` (the endpoint record's TTL) and at most
        ``endpoint_drain_timeout_s`` (``raylift.triggers.drain.ServeIngressDrainedTrigger``; deferrable)."""
        import time

        from raylift.triggers.drain import ServeIngressDrainedTrigger

        opts = self.options
        host = self.on_cluster(cluster).head_host()
        return ServeIngressDrainedTrigger(
            f"http://{host}:{opts.metrics_port}/metrics", hold_until=time.time() + float(opts.endpoint_drain_s),
            timeout_s=float(opts.endpoint_drain_timeout_s), poll_interval_s=float(self.scale_poll_interval_s))

    def retire_cluster(self, cluster: str, drained: dict[str, Any] | None = None) -> str:
        """Scale in and delete ``cluster``'s services once its proxy has drained: ``drained`` is the event of
        ``drain_trigger`` (a deferred promote waited in the triggerer), else the wait runs here. A drain that does
        not end in time fails with blue still running (its streams are never cut; promote's retry retires it)."""
        plan = self._plan_for(blue=cluster)
        if drained is None:
            log.info("blue/green on ECS %r: %s keeps serving until its requests in flight finish (at least %.0f s, "
                     "at most %.0f s), then is retired", self.cluster, cluster, self.options.endpoint_drain_s,
                     self.options.endpoint_drain_timeout_s)
            drained = self.drain_trigger(cluster).wait()
        if drained.get("status") != "success":
            raise ClusterError(
                f"the old pair {plan.blue_head}/{plan.blue_worker} on ECS {self.cluster!r} was not retired: "
                f"{drained.get('message', drained.get('status'))}. The endpoint serves the new pair; the old one "
                "keeps running, so no request was cut. Retry the promote step to retire it once its requests end, "
                "or raise the target option endpoint_drain_timeout_s. If the metrics port does not answer, open "
                "Ray's metrics_port (terraform ecs_ray: ray_ports[\"metrics\"]) to the Airflow workers.")
        self.retire_blue(plan)
        return f"the old service pair {plan.blue_head}, {plan.blue_worker} scaled in and deleted"

    def remove_cluster(self, cluster: str, *, timeout_s: float | None = None) -> str:
        """Green's service pair scaled in and deleted (``remove_green``): no wait, so ``timeout_s`` bounds nothing."""
        plan = self._plan_for(green=cluster)
        self.remove_green(plan)
        return f"the candidate's service pair {plan.green_head}, {plan.green_worker} scaled in and deleted"

    def _refuse_when_active(self, plan: GreenPlan, what: str) -> None:
        """ClusterError when ``plan``'s green is the active pair already (a stale plan would act on what serves)."""
        if self.active_pair() == (plan.green_head, plan.green_worker):
            raise ClusterError(
                f"Cannot {what}: {plan.green_head}/{plan.green_worker} on ECS {self.cluster!r} is the active pair "
                "(the endpoint points at it). Make a new plan with green_plan."
            )


def _place(need: TaskResources, pool: list[str], free: dict[str, TaskResources]) -> bool:
    """Reserve ``need`` on the first instance of ``pool`` with room for it (first fit); False when none has."""
    for key in pool:
        if need.fits_in(free[key]):
            free[key] = free[key] - need
            return True
    return False


def _sum(items: Any) -> TaskResources:
    from raylift.hooks.ecs_service import TaskResources

    total = TaskResources()
    for item in items:
        total = total + item
    return total
