"""ECS services as Ray head and workers: resize them, read how many tasks run, and on which instances.

A service with an Application Auto Scaling target is resized through its min/max capacity (setting
``desiredCount`` behind the autoscaler's back would be undone); others through ``desiredCount``.

"The services are up" is defined once, as the custom waiter ``services_at_desired_count`` in
``raylift/waiters/ecs.json`` (every service runs its desired count, none pending, none missing or
INACTIVE; throttled polls retried). The in-process wait here and ``EcsServicesRunningTrigger`` both drive it.

An image rollout is a new task-definition revision (the old one's settings, the new image) and a service update
to it, which is a new ECS deployment; "it is done" is boto's own ``services_stable`` waiter (one deployment left,
running its desired count), which ``wait_for_stable_services`` and ``EcsServicesStableTrigger`` both drive.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from airflow.providers.amazon.aws.hooks.ecs import EcsHook

from raylift.errors import ClusterError

WAITERS = Path(__file__).resolve().parents[1] / "waiters"
SERVICES_WAITER = "services_at_desired_count"
# boto's own ECS waiter: not in raylift's ecs.json, so the provider's get_waiter falls back to the client's
STABLE_WAITER = "services_stable"
INSTANCE_TYPE_ATTRIBUTE = "ecs.instance-type"  # set by the ECS agent on every EC2 container instance
DESCRIBE_BATCH = 100  # DescribeTasks / DescribeContainerInstances take at most 100 ARNs per call


@dataclass(frozen=True)
class ServiceCounts:
    name: str
    desired: int
    running: int
    pending: int
    status: str

    def reached(self, want: int) -> bool:
        """All wanted tasks run and none is still starting (for 0: none runs)."""
        return self.running >= want and self.pending == 0 and (want > 0 or self.running == 0)


@dataclass(frozen=True)
class ServiceInstances:
    """Where some services' tasks run: distinct EC2 instances by type, and the tasks that run on none."""

    instance_types: dict[str, int] = field(default_factory=dict)  # instance type -> distinct instances
    fargate_tasks: int = 0  # tasks without a container instance (Fargate): no EC2 instance behind them


def resource_id(cluster: str, service: str) -> str:
    return f"service/{cluster}/{service}"


def _batches(items: list[str], size: int = DESCRIBE_BATCH) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def lagging_services(reply: dict[str, Any]) -> str:
    """The services of a ``DescribeServices`` reply not at their desired count, as ``name r/d running (p pending)``."""
    return ", ".join(
        f"{s['serviceName']} {s.get('runningCount', 0)}/{s.get('desiredCount', 0)} running "
        f"({s.get('pendingCount', 0)} pending)"
        for s in sorted(reply.get("services") or [], key=lambda s: s["serviceName"])
        if s.get("runningCount") != s.get("desiredCount") or s.get("pendingCount", 0) > 0
    )


def _describe_refused(reply: dict[str, Any], cluster: str) -> str | None:
    """Why ``DescribeServices`` itself failed or named missing services (both ECS waits end on it), or None."""
    if "Error" in reply:
        error = reply["Error"]
        return f"DescribeServices on {cluster!r} failed: {error.get('Code', '?')}: {error.get('Message', '')}"
    if reply.get("failures"):
        return f"ECS cluster {cluster!r} has no service(s) {_failures(reply)}: check the target options."
    return None


def services_wait_message(reply: dict[str, Any], cluster: str, *, waited_s: float | None = None) -> str:
    """Why a wait on services of ``cluster`` ended without success, read from the last ``DescribeServices`` reply.

    :param reply: the last reply the waiter judged (a parsed error reply has an ``Error`` key).
    :param waited_s: set when the wait ran out of attempts: the message then names the lagging services.
    """
    if waited_s is not None:
        return (
            f"ECS services in {cluster!r} not at their desired count after {waited_s:.0f}s: "
            f"{lagging_services(reply) or 'no DescribeServices reply to show'}. "
            "Check capacity providers/instances and the service events."
        )
    refused = _describe_refused(reply, cluster)
    if refused:
        return refused
    inactive = sorted(s["serviceName"] for s in reply.get("services") or [] if s.get("status") == "INACTIVE")
    return f"ECS service(s) {inactive} in {cluster!r} are INACTIVE (deleted): check the target options."


def unstable_services(reply: dict[str, Any]) -> str:
    """The services of a ``DescribeServices`` reply that ``services_stable`` does not accept yet, as
    ``name: d deployments, r/d running``."""
    return ", ".join(
        f"{s['serviceName']}: {len(s.get('deployments') or [])} deployment(s), "
        f"{s.get('runningCount', 0)}/{s.get('desiredCount', 0)} running"
        for s in sorted(reply.get("services") or [], key=lambda s: s["serviceName"])
        if len(s.get("deployments") or []) != 1 or s.get("runningCount") != s.get("desiredCount")
    )


def stable_wait_message(reply: dict[str, Any], cluster: str, *, waited_s: float | None = None) -> str:
    """Why a ``services_stable`` wait on ``cluster`` ended without success, read from its last reply.

    :param waited_s: set when the wait ran out of attempts: the message then names the unsettled services.
    """
    if waited_s is not None:
        return (
            f"ECS services in {cluster!r} not stable after {waited_s:.0f}s (a deployment still replacing tasks): "
            f"{unstable_services(reply) or 'no DescribeServices reply to show'}. Check the services' events and "
            "the new tasks' stopped reasons (image pull, capacity)."
        )
    refused = _describe_refused(reply, cluster)
    if refused:
        return refused
    gone = sorted(
        f"{s['serviceName']} ({s.get('status')})" for s in reply.get("services") or []
        if s.get("status") in ("DRAINING", "INACTIVE")
    )
    return f"ECS service(s) {gone} in {cluster!r} are being deleted or deleted: check the target options."


def image_repository(image: str) -> str:
    """``registry/name`` of an image reference ``registry/name:tag`` or ``registry/name@sha256:...``."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def _env_has(container: dict[str, Any], environment: dict[str, str]) -> bool:
    """Whether a container definition sets every variable of ``environment`` to its value."""
    have = {e.get("name"): e.get("value") for e in container.get("environment") or []}
    return all(have.get(k) == v for k, v in environment.items())


def _with_env(container: dict[str, Any], environment: dict[str, str]) -> list[dict[str, str]]:
    """A container definition's ``environment`` list with ``environment``'s variables set (order kept)."""
    have = [e for e in container.get("environment") or [] if e.get("name") not in environment]
    return have + [{"name": k, "value": v} for k, v in environment.items()]


def container_env(task_definition: dict[str, Any], repository_uri: str, name: str) -> str | None:
    """The value of variable ``name`` in the first container of ``task_definition`` running an image of
    ``repository_uri`` (Ray's container), or None."""
    for c in task_definition.get("containerDefinitions") or []:
        if image_repository(c.get("image", "")) == repository_uri:
            for e in c.get("environment") or []:
                if e.get("name") == name:
                    return str(e.get("value"))
    return None


def _failures(reply: dict[str, Any]) -> str:
    """A Describe* reply's failures as ``id (reason), ...``."""
    failures = reply.get("failures") or []
    return ", ".join(f"{f.get('arn', '?').split('/')[-1]} ({f.get('reason')})" for f in failures)


# -- a blue/green release's second pair of services (raylift.targets.ecs_blue_green) -----------------------------
SERVICE_COPIED = (  # what a green service copies from its blue one, as CreateService takes it
    "networkConfiguration", "capacityProviderStrategy", "placementConstraints", "placementStrategy",
    "deploymentConfiguration", "enableExecuteCommand", "propagateTags", "enableECSManagedTags", "platformVersion",
)


@dataclass(frozen=True)
class TaskResources:
    """What a task reserves on a container instance, or what one has left: CPU units, MiB, GPUs."""

    cpu: int = 0
    memory: int = 0
    gpu: int = 0

    def fits_in(self, free: TaskResources) -> bool:
        return self.cpu <= free.cpu and self.memory <= free.memory and self.gpu <= free.gpu

    def __add__(self, other: TaskResources) -> TaskResources:
        return TaskResources(self.cpu + other.cpu, self.memory + other.memory, self.gpu + other.gpu)

    def __sub__(self, other: TaskResources) -> TaskResources:
        return TaskResources(self.cpu - other.cpu, self.memory - other.memory, self.gpu - other.gpu)

    def __str__(self) -> str:
        return f"CPU {self.cpu} units, memory {self.memory} MiB, GPU {self.gpu}"


@dataclass(frozen=True)
class ContainerCapacity:
    """One ACTIVE container instance: its EC2 instance, what it registered and what ECS says is left on it."""

    arn: str
    ec2_instance_id: str
    registered: TaskResources
    remaining: TaskResources


def _resources(entries: list[dict[str, Any]]) -> TaskResources:
    """``registeredResources``/``remainingResources`` as numbers (GPU is a set of GPU ids, or a count)."""
    found = {"CPU": 0, "MEMORY": 0, "GPU": 0}
    for r in entries:
        if r.get("name") in found:
            ids = r.get("stringSetValue")
            found[r["name"]] = len(ids) if r.get("type") == "STRINGSET" and ids is not None else int(
                r.get("integerValue") or 0
            )
    return TaskResources(found["CPU"], found["MEMORY"], found["GPU"])


def task_resources(task_definition: dict[str, Any]) -> TaskResources:
    """What one task of a task definition reserves: its task-level cpu/memory, else its containers' sum
    (``memoryReservation`` where ``memory`` is unset), and its containers' GPU resourceRequirements."""
    containers = task_definition.get("containerDefinitions") or []
    cpu = int(task_definition.get("cpu") or sum(int(c.get("cpu") or 0) for c in containers))
    memory = int(
        task_definition.get("memory") or sum(int(c.get("memory") or c.get("memoryReservation") or 0) for c in containers)
    )
    gpu = sum(
        int(r.get("value") or 0) for c in containers for r in c.get("resourceRequirements") or [] if r.get("type") == "GPU"
    )
    return TaskResources(cpu, memory, gpu)


class EcsServiceHook(EcsHook):
    """The provider's ``EcsHook`` with service scaling; custom waiters in ``raylift/waiters/ecs.json``."""

    @property
    def waiter_path(self) -> Path:
        """raylift's ``waiters/ecs.json``: the provider's own lookup only searches its package."""
        return WAITERS / f"{self.client_type}.json"

    @cached_property
    def _autoscaling_hook(self) -> AwsBaseHook:  # one client per hook: a scale asks it twice per service
        return AwsBaseHook(
            aws_conn_id=self.aws_conn_id, region_name=self.region_name, client_type="application-autoscaling"
        )

    def _autoscaling(self) -> AwsBaseHook:
        return self._autoscaling_hook

    def service_counts(self, cluster: str, services: list[str]) -> dict[str, ServiceCounts]:
        """Desired/running/pending per service; ClusterError naming any that do not exist."""
        reply = self.conn.describe_services(cluster=cluster, services=services)
        if reply.get("failures"):
            missing = ", ".join(f"{f.get('arn', '?').split('/')[-1]} ({f.get('reason')})" for f in reply["failures"])
            raise ClusterError(f"ECS cluster {cluster!r} has no service(s) {missing}: check the target options.")
        return {
            s["serviceName"]: ServiceCounts(
                s["serviceName"], s["desiredCount"], s["runningCount"], s.get("pendingCount", 0), s.get("status", "")
            )
            for s in reply["services"]
        }

    def scalable_target(self, cluster: str, service: str) -> dict[str, Any] | None:
        reply = self._autoscaling().conn.describe_scalable_targets(
            ServiceNamespace="ecs",
            ResourceIds=[resource_id(cluster, service)],
            ScalableDimension="ecs:service:DesiredCount",
        )
        targets = reply.get("ScalableTargets") or []
        return targets[0] if targets else None

    def scale_service(self, cluster: str, service: str, count: int) -> str:
        """Resize ``service`` to ``count`` tasks; returns how ("autoscaling" or "desired_count")."""
        if count < 0:
            raise ClusterError(f"Cannot scale ECS service {service!r} to {count} tasks.")
        target = self.scalable_target(cluster, service)
        if target is not None:
            high = max(count, int(target["MaxCapacity"])) if count > 0 else 0
            self._autoscaling().conn.register_scalable_target(
                ServiceNamespace="ecs",
                ResourceId=resource_id(cluster, service),
                ScalableDimension="ecs:service:DesiredCount",
                MinCapacity=count,
                MaxCapacity=high,
            )
            self.log.info("ECS service %s/%s: autoscaling capacity now %d..%d", cluster, service, count, high)
            return "autoscaling"
        self.conn.update_service(cluster=cluster, service=service, desiredCount=count)
        self.log.info("ECS service %s/%s: desiredCount %d", cluster, service, count)
        return "desired_count"

    def service_instances(self, cluster: str, services: list[str]) -> ServiceInstances:
        """The EC2 instances that run ``services``' tasks (desired RUNNING), counted once each by instance
        type: several tasks on one instance are one billed node. The type is the container instance's
        ``ecs.instance-type`` attribute, or EC2's DescribeInstances where the attribute is absent."""
        from botocore.exceptions import ClientError

        task_arns: dict[str, None] = {}  # ordered set: a task belongs to one service, listed once
        try:
            for service in services:
                pages = self.conn.get_paginator("list_tasks").paginate(
                    cluster=cluster, serviceName=service, desiredStatus="RUNNING"
                )
                task_arns.update(dict.fromkeys(arn for page in pages for arn in page["taskArns"]))
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("ClusterNotFoundException", "ServiceNotFoundException"):
                raise ClusterError(
                    f"ECS cluster {cluster!r} or its service(s) {services} not found "
                    f"({exc.response['Error'].get('Message', '')}): check the target options."
                ) from None
            raise

        hosts: dict[str, None] = {}
        fargate = 0
        for batch in _batches(list(task_arns)):
            reply = self.conn.describe_tasks(cluster=cluster, tasks=batch)
            if reply.get("failures"):
                raise ClusterError(
                    f"ECS cluster {cluster!r} could not describe task(s) {_failures(reply)}; try again."
                )
            for task in reply["tasks"]:
                if task.get("containerInstanceArn"):
                    hosts[task["containerInstanceArn"]] = None
                else:
                    fargate += 1

        types: dict[str, str] = {}  # container instance ARN -> instance type
        untyped: dict[str, str] = {}  # EC2 instance id -> container instance ARN, for DescribeInstances
        for batch in _batches(list(hosts)):
            reply = self.conn.describe_container_instances(cluster=cluster, containerInstances=batch)
            if reply.get("failures"):
                raise ClusterError(
                    f"ECS cluster {cluster!r} could not describe container instance(s) {_failures(reply)}; "
                    "try again."
                )
            for instance in reply["containerInstances"]:
                arn = instance["containerInstanceArn"]
                attributes = {a["name"]: a.get("value") for a in instance.get("attributes") or []}
                if attributes.get(INSTANCE_TYPE_ATTRIBUTE):
                    types[arn] = attributes[INSTANCE_TYPE_ATTRIBUTE]
                elif instance.get("ec2InstanceId"):
                    untyped[instance["ec2InstanceId"]] = arn
                else:
                    raise ClusterError(
                        f"ECS container instance {arn} has neither an {INSTANCE_TYPE_ATTRIBUTE!r} attribute "
                        "nor an EC2 instance id (an external instance?): its instance type is unknown."
                    )
        if untyped:
            ec2 = AwsBaseHook(
                aws_conn_id=self.aws_conn_id, region_name=self.region_name, client_type="ec2"
            ).conn
            for page in ec2.get_paginator("describe_instances").paginate(InstanceIds=list(untyped)):
                for reservation in page["Reservations"]:
                    for ec2_instance in reservation["Instances"]:
                        if ec2_instance["InstanceId"] in untyped:
                            types[untyped[ec2_instance["InstanceId"]]] = ec2_instance["InstanceType"]
            unknown = sorted(i for i, arn in untyped.items() if arn not in types)
            if unknown:
                raise ClusterError(
                    f"EC2 does not describe instance(s) {unknown} of ECS cluster {cluster!r}: "
                    "their instance type is unknown."
                )
        return ServiceInstances(dict(Counter(types.values())), fargate)

    # -- scale-in of exactly the drained tasks (raylift.targets.scale_in) ----------------------------
    def service_task_ips(self, cluster: str, service: str, *, require_ips: bool = True) -> dict[str, set[str]]:
        """``{task ARN: its private IPv4s}`` for the tasks of ``service`` that run or are starting (desired RUNNING):
        the IP of a task's awsvpc ENI is the ``node_ip`` Ray reports for the node in it. With ``require_ips``,
        ClusterError naming the tasks that have none (bridge or host networking: raylift cannot tell their Ray node
        apart)."""
        arns = [arn for page in self.conn.get_paginator("list_tasks").paginate(
            cluster=cluster, serviceName=service, desiredStatus="RUNNING") for arn in page["taskArns"]]
        found: dict[str, set[str]] = {}
        for batch in _batches(arns):
            reply = self.conn.describe_tasks(cluster=cluster, tasks=batch)
            if reply.get("failures"):
                raise ClusterError(f"ECS cluster {cluster!r} could not describe task(s) {_failures(reply)}; try again.")
            for task in reply["tasks"]:
                if task.get("group") != f"service:{service}" or task.get("desiredStatus") != "RUNNING":
                    continue  # ListTasks' serviceName filter, checked on the task itself
                found[task["taskArn"]] = {
                    d["value"] for a in task.get("attachments") or [] if a.get("type") == "ElasticNetworkInterface"
                    for d in a.get("details") or [] if d.get("name") == "privateIPv4Address"
                }
        blind = sorted(arn.rsplit("/", 1)[-1] for arn, ips in found.items() if not ips)
        if blind and require_ips:
            raise ClusterError(
                f"ECS task(s) {blind} of service {cluster}/{service} have no awsvpc network interface, so raylift "
                "cannot tell which Ray node runs in each and cannot drain it before stopping it. Run the Ray workers "
                "with networkMode awsvpc (as the terraform stack does). Nothing was changed."
            )
        return found

    def stop_tasks(self, cluster: str, tasks: list[str], reason: str) -> None:
        """StopTask on each of ``tasks`` (ECS sends SIGTERM, then SIGKILL after the container's stopTimeout)."""
        for arn in tasks:
            self.conn.stop_task(cluster=cluster, task=arn, reason=reason[:255])
            self.log.info("ECS task %s stopped (%s)", arn, reason)

    def wait_for_services(
        self, cluster: str, services: list[str], *, waiter_delay: float = 15, waiter_max_attempts: int = 40
    ) -> None:
        """Block (in-process) on the ``services_at_desired_count`` waiter; the deferrable path is
        ``EcsServicesRunningTrigger``. A throttled poll is one more attempt (the waiter's retry acceptors).
        ClusterError naming missing services, or the lagging ones when the attempts run out."""
        from botocore.exceptions import WaiterError

        try:
            self.get_waiter(SERVICES_WAITER).wait(
                cluster=cluster,
                services=services,
                WaiterConfig={"Delay": waiter_delay, "MaxAttempts": waiter_max_attempts},
            )
        except WaiterError as exc:
            timed_out = str(exc.kwargs.get("reason", "")).startswith("Max attempts exceeded")
            raise ClusterError(
                services_wait_message(
                    exc.last_response or {}, cluster, waited_s=waiter_delay * waiter_max_attempts if timed_out else None
                )
            ) from None

    # -- image rollout -----------------------------------------------------------------------------
    def service_task_definitions(self, cluster: str, services: list[str]) -> dict[str, str]:
        """The task-definition ARN each service is set to (its PRIMARY deployment's); ClusterError naming any missing."""
        reply = self.conn.describe_services(cluster=cluster, services=services)
        if reply.get("failures"):
            raise ClusterError(f"ECS cluster {cluster!r} has no service(s) {_failures(reply)}: check the target options.")
        return {s["serviceName"]: s["taskDefinition"] for s in reply["services"]}

    def revisions_with_image(
        self,
        task_definitions: list[str],
        repository_uri: str,
        image: str,
        environment: dict[str, str] | None = None,
    ) -> dict[str, str]:
        """For each of ``task_definitions``, a revision whose containers that run an image of ``repository_uri`` run
        ``image``: ``{task definition: revision}``, the task definition itself where they already do.

        Everything else is copied (whatever ``RegisterTaskDefinition`` takes, tags included), so a rollout changes
        the image only. All are checked before any is registered: ClusterError, with nothing registered, when one
        has no container running an image of the repository (raylift would not know which container is Ray's).
        """
        described = {
            arn: self.conn.describe_task_definition(taskDefinition=arn, include=["TAGS"]) for arn in task_definitions
        }
        for arn, reply in described.items():
            containers = reply["taskDefinition"].get("containerDefinitions") or []
            if not any(image_repository(c.get("image", "")) == repository_uri for c in containers):
                found = ", ".join(f"{c.get('name')}={c.get('image')}" for c in containers) or "no containers"
                raise ClusterError(
                    f"No container of ECS task definition {arn} runs an image of {repository_uri} ({found}), so "
                    f"raylift cannot roll out {image}: point the task definition at the repository (terraform's "
                    "image variable) or set the target option 'roll_out_image' to false."
                )
        return {
            arn: self._register_with_image(reply, repository_uri, image, environment) for arn, reply in described.items()
        }

    def _register_with_image(
        self, reply: dict[str, Any], repository_uri: str, image: str, environment: dict[str, str] | None = None
    ) -> str:
        """Register a copy of a ``DescribeTaskDefinition`` reply running ``image`` (unless it already does), with
        ``environment`` set in the containers that run it (a blue/green release's workers: green's head address)."""
        current = reply["taskDefinition"]
        containers = current.get("containerDefinitions") or []
        ours = [c for c in containers if image_repository(c.get("image", "")) == repository_uri]
        env = environment or {}
        if all(c["image"] == image and _env_has(c, env) for c in ours):
            return str(current["taskDefinitionArn"])
        registrable = self.conn.meta.service_model.operation_model("RegisterTaskDefinition").input_shape.members
        revision = {k: v for k, v in current.items() if k in registrable}
        revision["containerDefinitions"] = [
            {**c, "image": image, **({"environment": _with_env(c, env)} if env else {})} if c in ours else c
            for c in containers
        ]
        if reply.get("tags"):
            revision["tags"] = reply["tags"]
        new = self.conn.register_task_definition(**revision)["taskDefinition"]["taskDefinitionArn"]
        self.log.info("ECS task definition %s registered from %s, running %s", new, current["taskDefinitionArn"], image)
        return str(new)

    def deploy_revision(self, cluster: str, service: str, task_definition: str) -> str:
        """Update ``service`` to ``task_definition``: a new ECS deployment, which replaces its tasks (the service's
        deployment configuration says how). Returns the new deployment's id."""
        from botocore.exceptions import ClientError

        try:
            reply = self.conn.update_service(
                cluster=cluster, service=service, taskDefinition=task_definition, forceNewDeployment=True
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("ClientException", "InvalidParameterException"):
                raise ClusterError(
                    f"ECS service {cluster}/{service} cannot be updated to {task_definition}: "
                    f"{exc.response['Error'].get('Message', '')} (is the revision deregistered?)"
                ) from None
            raise
        deployments = reply["service"].get("deployments") or []
        primary = next((d for d in deployments if d.get("status") == "PRIMARY"), deployments[0] if deployments else {})
        self.log.info("ECS service %s/%s: deployment %s of %s", cluster, service, primary.get("id"), task_definition)
        return str(primary.get("id", ""))

    def wait_for_stable_services(
        self, cluster: str, services: list[str], *, waiter_delay: float = 15, waiter_max_attempts: int = 40
    ) -> None:
        """Block (in-process) on boto's ``services_stable`` waiter (one deployment per service, running its desired
        count); the deferrable path is ``EcsServicesStableTrigger``. ClusterError saying which did not settle."""
        from botocore.exceptions import WaiterError

        try:
            self.get_waiter(STABLE_WAITER).wait(
                cluster=cluster,
                services=services,
                WaiterConfig={"Delay": waiter_delay, "MaxAttempts": waiter_max_attempts},
            )
        except WaiterError as exc:
            timed_out = str(exc.kwargs.get("reason", "")).startswith("Max attempts exceeded")
            raise ClusterError(
                stable_wait_message(
                    exc.last_response or {}, cluster, waited_s=waiter_delay * waiter_max_attempts if timed_out else None
                )
            ) from None

    # -- a blue/green release's second pair of services (raylift.targets.ecs_blue_green) ---------------------------
    def describe_service(self, cluster: str, service: str) -> dict[str, Any] | None:
        """``service`` as DescribeServices tells it (with its tags), or None when it is missing or INACTIVE."""
        reply = self.conn.describe_services(cluster=cluster, services=[service], include=["TAGS"])
        found = [s for s in reply.get("services") or [] if s.get("status") != "INACTIVE"]
        return dict(found[0]) if found else None

    def task_definition(self, task_definition: str) -> dict[str, Any]:
        """DescribeTaskDefinition's ``taskDefinition``."""
        return dict(self.conn.describe_task_definition(taskDefinition=task_definition)["taskDefinition"])

    def create_service_like(
        self,
        cluster: str,
        service: str,
        like: dict[str, Any],
        task_definition: str,
        desired: int,
        registry_arn: str | None,
    ) -> str:
        """CreateService ``service`` as a copy of ``like`` (a DescribeServices entry: network configuration, capacity
        provider strategy or launch type, placement, deployment configuration, tags) running ``task_definition`` at
        ``desired`` tasks, registered in the Cloud Map service ``registry_arn`` if given. Idempotent: an ACTIVE
        service of that name running ``task_definition`` is kept (a retried release); one running another revision,
        or still DRAINING from a deletion, is a ClusterError. Returns the service's ARN."""
        from botocore.exceptions import ClientError

        existing = self.describe_service(cluster, service)
        if existing is None:
            request: dict[str, Any] = {k: like[k] for k in SERVICE_COPIED if like.get(k) not in (None, [], {})}
            if "capacityProviderStrategy" not in request and like.get("launchType"):
                request["launchType"] = like["launchType"]
            if like.get("tags"):
                request["tags"] = like["tags"]
            if registry_arn:
                request["serviceRegistries"] = [{"registryArn": registry_arn}]
            try:
                reply = self.conn.create_service(
                    cluster=cluster, serviceName=service, taskDefinition=task_definition, desiredCount=desired,
                    clientToken=f"raylift-{service}-{task_definition.rsplit(':', 1)[-1]}"[:36], **request,
                )  # fmt: skip
                self.log.info("ECS service %s/%s created on %s (%d task(s))", cluster, service, task_definition, desired)
                return str(reply["service"]["serviceArn"])
            except ClientError as exc:  # a concurrent or earlier try created it: look again below
                if exc.response["Error"]["Code"] != "InvalidParameterException":
                    raise
                existing = self.describe_service(cluster, service)
                if existing is None:
                    raise ClusterError(
                        f"ECS refused to create service {cluster}/{service}: {exc.response['Error'].get('Message', '')}"
                    ) from None
        if existing.get("status") == "DRAINING":
            raise ClusterError(
                f"ECS service {cluster}/{service} is still DRAINING from an earlier deletion: ECS cannot create it "
                "again until it is INACTIVE (minutes). Retry the task then."
            )
        if existing.get("taskDefinition") != task_definition:
            raise ClusterError(
                f"ECS service {cluster}/{service} exists already, on {existing.get('taskDefinition')} rather than "
                f"{task_definition}: it is not this release's. Delete it (or let its release remove it) and retry."
            )
        self.log.info("ECS service %s/%s exists already on %s: kept (a retry)", cluster, service, task_definition)
        return str(existing["serviceArn"])

    def delete_service(self, cluster: str, service: str) -> bool:
        """DeleteService ``service`` (scaled to 0 before: ECS refuses to delete a service with tasks to run);
        False when it is missing or deleted already."""
        from botocore.exceptions import ClientError

        try:
            self.conn.delete_service(cluster=cluster, service=service)
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("ServiceNotFoundException", "ServiceNotActiveException"):
                return False
            raise
        self.log.info("ECS service %s/%s deleted", cluster, service)
        return True

    def container_capacity(self, cluster: str) -> list[ContainerCapacity]:
        """Every ACTIVE container instance of ``cluster``: registered and remaining CPU, memory and GPUs, as ECS
        reports them (what running tasks, a blue pair's included, already reserve is not remaining)."""
        arns = [
            arn
            for page in self.conn.get_paginator("list_container_instances").paginate(cluster=cluster, status="ACTIVE")
            for arn in page["containerInstanceArns"]
        ]
        found: list[ContainerCapacity] = []
        for batch in _batches(arns):
            reply = self.conn.describe_container_instances(cluster=cluster, containerInstances=batch)
            if reply.get("failures"):
                raise ClusterError(
                    f"ECS cluster {cluster!r} could not describe container instance(s) {_failures(reply)}; try again."
                )
            found += [
                ContainerCapacity(
                    i["containerInstanceArn"],
                    str(i.get("ec2InstanceId") or ""),
                    _resources(i.get("registeredResources") or []),
                    _resources(i.get("remainingResources") or []),
                )
                for i in reply["containerInstances"]
            ]
        return found

    def capacity_provider_groups(self, providers: list[str]) -> dict[str, str | None]:
        """``{capacity provider: its Auto Scaling group's name}`` (None for Fargate's, which have none)."""
        if not providers:
            return {}
        reply = self.conn.describe_capacity_providers(capacityProviders=providers)
        groups: dict[str, str | None] = dict.fromkeys(providers)
        for p in reply.get("capacityProviders") or []:
            arn = (p.get("autoScalingGroupProvider") or {}).get("autoScalingGroupArn") or ""
            groups[p["name"]] = arn.rsplit("autoScalingGroupName/", 1)[-1] if arn else None
        return groups
