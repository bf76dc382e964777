"""``ecs``: a Ray cluster as two ECS services (head + workers), found through Cloud Map.

Scaling resizes the services; readiness is first ECS's running count (``EcsServicesRunningTrigger``),
then what the Ray head itself reports (nodes, GPUs). Deploys go through the Serve REST API on the
head, with the serve-app zip in S3 as ``runtime_env.working_dir`` and the image from CodeBuild/ECR.

Image rollout: re-pointing a moving tag never reaches running tasks (ECS resolves a tag when a task starts), so
the scale step, under the release's lease, registers a task-definition revision running this checkout's image by
digest and updates the services to it (a new ECS deployment); the readiness wait is then boto's
``services_stable`` (``EcsServicesStableTrigger``). Each release's rollout is kept in the state store, so
``roll_back_image`` can put the services back on the revisions they ran before it.

A new head task starts with no Serve apps (Serve's config lives in the head's memory). So the rollout record also
keeps the Serve config the head ran before it (when it answered), and for the rest of that release
``current_serve_config`` gives that config while the new head lists no app: the deploy step merges its app into it
and re-submits every app, and its pre-deploy snapshot is what really served before the release. The rollback
step (``undo_cluster_change``) puts the services back on their revisions, waits for ``services_stable``, then
re-applies that config to the head that started again on the old image.
"""

from __future__ import annotations

import logging
import re
import time
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from raylift.config import DRAIN_TIMEOUT_S
from raylift.errors import ClusterError, ClusterNotReadyError, RayliftError, RayliftValueError
from raylift.records import Artifact, ClusterExpectation, ClusterState
from raylift.targets.aws import AwsOptions, AwsTarget, PositiveSeconds
from raylift.targets.ecs_blue_green import EcsBlueGreen
from raylift.targets.ecs_staging import EcsStaging
from raylift.targets.ray_jobs import RayJobChecks
from raylift.targets.scale_in import DrainedScaleIn, ScaleInPlan

if TYPE_CHECKING:
    from raylift.hooks.ray_drain import RayDrainHook
    from raylift.serve.hardware import InstanceShape
    from raylift.store import ObjectStore
    from raylift.targets.base import ClusterUndo

log = logging.getLogger(__name__)
_KEY_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
UNLEASED = "unleased"  # the rollout record's name when no release lease is held (a scale called by hand)


DASHBOARD_CONNECT_TIMEOUT_S = 5.0  # one TCP connect to the head's dashboard port, when a read of it failed


class DashboardUnreachableError(RayliftError):
    """ECS runs the Ray head, but Airflow cannot open a connection to its dashboard: the network (a security group)
    refuses it. Not a ClusterError, which the ready sensor waits out: waiting does not open a security group."""


Port = Annotated[int, Field(ge=1, le=65535)]
Gpus = Annotated[float, Field(ge=0)]


class EcsOptions(AwsOptions):
    """The ``ecs`` target's ``target_options``: the shared AWS options plus where the cluster is. The terraform
    stack's names ``cloudmap_namespace``/``cloudmap_service`` are refused with raylift's."""

    TARGET: ClassVar[str] = "ecs"
    RENAMED: ClassVar[dict[str, tuple[str, ...]]] = {
        **AwsOptions.RENAMED,
        "cloudmap_namespace": ("cloud_map_namespace",),
        "cloudmap_service": ("cloud_map_service",),
    }

    cluster: str = Field(min_length=1, description="the ECS cluster's name")
    head_service: str = Field("ray-head", min_length=1)
    worker_service: str = Field("ray-worker", min_length=1)
    head_address: str | None = Field(None, min_length=1)
    cloud_map_namespace: str | None = Field(None, min_length=1)
    cloud_map_service: str = Field("head", min_length=1)
    # the raylift-owned Cloud Map service of the user endpoint (blue/green: one instance, re-registered at the
    # switch); None: the endpoint is the head's own service (no blue/green switch)
    endpoint_cloud_map_service: str | None = Field(None, min_length=1)
    # a blue/green release's room: "auto" checks that green fits beside blue before starting it; "none" starts it
    # unchecked (green may only start as blue goes: an announced outage, logged as such)
    blue_green_surge: Literal["auto", "none"] = "auto"
    # after the switch, the old pair is retired once its Serve proxy carries no request (the proxy's own
    # in-flight gauge, read on the head's Ray metrics port), but never before endpoint_drain_s (the endpoint
    # record's DNS TTL, terraform: 10 s, plus a margin: a resolver may still send new requests to the old head)
    # and at most endpoint_drain_timeout_s (then promote fails with the old pair still running: nothing is cut)
    endpoint_drain_s: PositiveSeconds = 60.0
    endpoint_drain_timeout_s: PositiveSeconds = 3600.0
    metrics_port: Port = 8080  # Ray's --metrics-export-port on the head (terraform ray_ports["metrics"])
    dashboard_port: Port = 8265
    serve_port: Port = 8000
    serve_host: str = Field("0.0.0.0", min_length=1)  # where Serve's proxy binds on the head
    endpoint: str | None = None
    head_gpus: Gpus | None = None  # None: gpus_per_node
    worker_gpus: Gpus | None = None  # None: gpus_per_node
    gpus_per_node: Gpus = 4.0
    image_tag: str | None = Field(None, min_length=1)
    roll_out_image: bool | None = None  # None: roll out where image_tag is set (the terraform stack's options)
    scale_timeout_s: PositiveSeconds = 900.0
    scale_poll_interval_s: PositiveSeconds = 10.0
    drain_timeout_s: PositiveSeconds = DRAIN_TIMEOUT_S  # a scale-in's Ray drain: its deadline
    # how long the ready check lets a running head's dashboard port take no connection before it fails, naming the
    # security group (Ray's dashboard listens some seconds after the container starts)
    dashboard_connect_grace_s: float = Field(90.0, ge=0)

    @model_validator(mode="after")
    def _finds_the_head(self) -> Self:
        if not self.head_address and not self.cloud_map_namespace:
            raise ValueError("The ecs target needs 'head_address' or 'cloud_map_namespace' to find the Ray head.")
        return self


class EcsTarget(EcsBlueGreen, EcsStaging, DrainedScaleIn, RayJobChecks, AwsTarget):
    """Options (all JSON, validated by ``EcsOptions``): ``cluster``, ``head_service``, ``worker_service``,
    ``head_address`` or ``cloud_map_namespace``/``cloud_map_service``, ``dashboard_port``, ``serve_port``,
    ``serve_host`` (where Serve's proxy binds on the head), ``endpoint``, ``head_gpus``, ``worker_gpus`` (or
    ``gpus_per_node`` for both), ``image_tag`` (the moving tag the task definitions run, re-pointed at each
    build's content tag), ``roll_out_image`` (scale puts the services on this checkout's image by digest: a new
    task-definition revision and deployment; default: where ``image_tag`` is set), ``drain_timeout_s`` (how long
    a scale-in waits for Ray to drain the workers it removes), plus the shared AWS options (``bucket``,
    ``ecr_repository``, ...).

    A scale-in drains first (``raylift.targets.scale_in``): the worker tasks to stop are picked from Ray's state,
    drained in Ray, and only then is the worker service's desiredCount lowered and exactly those tasks stopped.

    Model staging (target option ``staging``: ``remote``) runs as a one-off ECS task (``raylift.targets.ecs_staging``).

    Ray's Serve schema check runs as a Ray job on the head (``raylift.targets.ray_jobs``): the serving head's Ray
    judges the config (in a blue/green release too, before the candidate's cluster exists)."""

    name = "ecs"

    def __init__(self, **options: Any) -> None:
        """Keyword arguments are the DAG's ``target_options``; refused as a whole before anything is touched."""
        opts = EcsOptions.parse(options)
        super().__init__(opts)
        self.options = opts
        self.cluster = opts.cluster
        self.head_address, self.cloud_map_namespace = opts.head_address, opts.cloud_map_namespace
        self._services: tuple[str, str, str] | None = None  # (head, worker, Cloud Map service): see _pair
        self.dashboard_port, self.serve_port, self.endpoint = opts.dashboard_port, opts.serve_port, opts.endpoint
        self.serve_host = opts.serve_host
        self.head_gpus = opts.gpus_per_node if opts.head_gpus is None else opts.head_gpus
        self.worker_gpus = opts.gpus_per_node if opts.worker_gpus is None else opts.worker_gpus
        self.image_tag = opts.image_tag
        self.rolls_out_image = opts.image_tag is not None if opts.roll_out_image is None else opts.roll_out_image
        self.scale_timeout_s, self.scale_poll_interval_s = opts.scale_timeout_s, opts.scale_poll_interval_s
        self.drain_timeout_s = opts.drain_timeout_s
        self._submitted_at: float | None = None  # when this task last submitted a Serve config
        self._unreachable_since: float | None = None  # when the ready check first found the dashboard port closed

    # -- which service pair this target drives ---------------------------------------------------------
    def _pair(self) -> tuple[str, str, str]:
        """(head service, worker service, the head's Cloud Map service) this target drives: the pair ``on_cluster``
        bound, else the serving pair, read once per task. Where no blue/green release is possible (no
        ``endpoint_cloud_map_service``), the options' pair, with nothing read."""
        if self._services is None:
            opts = self.options
            if opts.endpoint_cloud_map_service is None:
                self._services = (opts.head_service, opts.worker_service, opts.cloud_map_service)
            else:
                head, worker = self.active_pair()
                self._services = (head, worker, self._discovery_name(head))
        return self._services

    @property
    def head_service(self) -> str:
        return self._pair()[0]

    @property
    def worker_service(self) -> str:
        return self._pair()[1]

    @property
    def cloud_map_service(self) -> str:
        return self._pair()[2]

    # -- hooks -------------------------------------------------------------------------------------
    def _ecs(self) -> Any:
        return self._ecs_hook

    @cached_property
    def _ecs_hook(self) -> Any:  # one client per target instance (a task), not per call
        from raylift.hooks.ecs_service import EcsServiceHook

        return EcsServiceHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)

    def head_host(self) -> str:
        """The head's host: ``head_address`` if set, else Cloud Map's registered IPv4."""
        if self.head_address:
            return self.head_address.split("://")[-1].split(":")[0].rstrip("/")
        from raylift.hooks.service_discovery import CloudMapHook

        hook = CloudMapHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)
        return hook.discover_host(self.cloud_map_namespace or "", self.cloud_map_service)

    def dashboard_url(self) -> str:
        return f"http://{self.head_host()}:{self.dashboard_port}"

    def _dashboard(self) -> Any:
        from raylift.hooks.ray_dashboard import RayDashboardHook

        return RayDashboardHook(self.dashboard_url(), conn_id=self.cluster_conn_id)

    # -- artifact ----------------------------------------------------------------------------------
    def finish_build(self, artifact: Artifact) -> Artifact:
        """Re-point the moving ``image_tag`` at this build's content tag (for people and terraform; the running
        tasks get the image from the scale step's rollout, by digest)."""
        if self.image_tag and artifact.image:
            from raylift.hooks.ecr import EcrImageHook

            content_tag = artifact.image.rsplit(":", 1)[1]
            hook = EcrImageHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)
            if hook.retag(self.aws.ecr_repository, content_tag, self.image_tag):
                log.info(
                    "ECR %s:%s now points at %s; ECS tasks started from now on run it",
                    self.aws.ecr_repository, self.image_tag, content_tag,
                )
        return artifact

    # -- cluster -----------------------------------------------------------------------------------
    def expectation(self, workers: int) -> ClusterExpectation:
        gpus = self.head_gpus + workers * self.worker_gpus
        return ClusterExpectation(nodes=1 + workers, resources={"GPU": gpus} if gpus else {})

    def scale(self, *, workers: int) -> ClusterExpectation:
        if workers < 0:
            raise RayliftValueError(f"workers must be >= 0 (got {workers}).")
        ecs = self._ecs()
        ecs.service_counts(self.cluster, [self.head_service, self.worker_service])  # both exist, or a clear error
        # before the counts: tasks started by the scale-up run the new revision; where the release replaces the
        # cluster in place (release: direct, an announced outage), or where the cluster serves no app (nothing to
        # protect: a first deploy, after a teardown): otherwise the deploy step releases it blue/green
        if self.rolls_out_image and (self.cluster_change_in_place or self.serves_nothing()):
            self.roll_out_image()
        ecs.scale_service(self.cluster, self.head_service, 1)
        ecs.scale_service(self.cluster, self.worker_service, workers)
        return self.expectation(workers)

    # -- scale-in: drain in Ray, then stop exactly those tasks (raylift.targets.scale_in) ------------
    def scale_in_members(self, workers: int) -> tuple[int, dict[str, set[str]]] | None:
        """The worker service's tasks (by their ENI IP) and how many a scale to ``workers`` stops; None when it
        stops none."""
        tasks = self._ecs().service_task_ips(self.cluster, self.worker_service)
        return (len(tasks) - workers, tasks) if len(tasks) > workers else None

    def remove_members(self, plan: ScaleInPlan) -> None:
        """Lower the worker service to ``plan.workers``, then at once StopTask every task of it but the keepers:
        the drained ones (a drained node's ``ray start --block`` keeps its container running), and a replacement
        ECS started meanwhile for a task that ended. ECS's scheduler acts on the new count asynchronously and finds
        the service at it by then, so it stops no keeper. (Task scale-in protection on the keepers would
        close even that window; moto, the tests' oracle, does not implement UpdateTaskProtection.)"""
        ecs = self._ecs()
        ecs.scale_service(self.cluster, self.worker_service, plan.workers)
        others = sorted(set(ecs.service_task_ips(self.cluster, self.worker_service, require_ips=False)) - set(plan.keep))
        ecs.stop_tasks(self.cluster, others, f"raylift scale-in to {plan.workers} worker(s): Ray node drained")

    def drain_dashboard(self) -> RayDrainHook:
        from raylift.hooks.ray_drain import RayDrainHook

        return RayDrainHook(self.dashboard_url(), conn_id=self.cluster_conn_id)

    def cluster_ready_trigger(self, want: ClusterExpectation) -> Any:
        """Defer until ECS runs the head and worker services' desired counts, which ``scale`` set for ``want``
        (whether Ray has ``want``'s nodes is asked afterwards, with check_ready)."""
        return self.scale_trigger()

    def scale_trigger(self, *, timeout_s: float | None = None, poll_interval_s: float | None = None) -> Any:
        """Defer until the head and worker services run their desired counts (``scale`` set them to 1 and
        the workers), or, where ``scale`` rolls out images, until their deployments settled (``services_stable``:
        one deployment each, at its desired count); then ask Ray with cluster_state."""
        from raylift.triggers.base import attempts_for
        from raylift.triggers.ecs import EcsServicesRunningTrigger, EcsServicesStableTrigger

        delay = poll_interval_s or self.scale_poll_interval_s
        trigger = EcsServicesStableTrigger if self.rolls_out_image else EcsServicesRunningTrigger
        return trigger(
            self.cluster,
            [self.head_service, self.worker_service],
            waiter_delay=delay,
            waiter_max_attempts=attempts_for(timeout_s or self.scale_timeout_s, delay),
            aws_conn_id=self.aws.aws_conn_id,
            region_name=self.aws.region_name,
        )

    # -- image rollout ------------------------------------------------------------------------------
    def image_reference(self) -> str:
        """This checkout's image by digest, ``<repository uri>@sha256:...``: the content tag resolved once, so a
        task ECS starts later (a restart, a scale-up) runs this very image, whatever the tags point at by then.
        ClusterError when ECR does not have it yet (build_artifact pushes it before the scale step)."""
        from botocore.exceptions import ClientError

        from raylift.aws.content import image_content_digest, image_tag
        from raylift.hooks.ecr import EcrImageHook

        ecr = EcrImageHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)
        uri = ecr.repository_uri(self.aws.ecr_repository)
        tag = image_tag(image_content_digest(self.root, self.image_name))
        try:
            reply = ecr.conn.describe_images(repositoryName=self.aws.ecr_repository, imageIds=[{"imageTag": tag}])
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ImageNotFoundException":
                raise
            reply = {}
        details = reply.get("imageDetails") or []
        if not details:
            raise ClusterError(
                f"ECR has no image {uri}:{tag} (this checkout's content tag) to roll out to ECS cluster "
                f"{self.cluster!r}: build_artifact pushes it before scale_cluster; run it first, or set the target "
                "option 'roll_out_image' to false to keep the services' task definitions as they are."
            )
        return f"{uri}@{details[0]['imageDigest']}"

    def release_name(self) -> str:
        """The release this target acts for: the holder of the writer lease it was given, else ``unleased``."""
        return self.held_lease.holder if self.held_lease is not None else UNLEASED

    @cached_property
    def _rollout_store(self) -> ObjectStore:  # one S3 client per target instance for the rollout records
        store: ObjectStore = self.state_store()
        return store

    def _rollout_key(self, release: str) -> str:
        cluster = _KEY_SAFE.sub("_", self.cluster_key())
        return f"_raylift/{cluster}/ecs_image_rollout/{_KEY_SAFE.sub('_', release)}.json"

    def image_rollout(self, release: str | None = None) -> dict[str, Any] | None:
        """What a release rolled out (``{"image", "release", "at", "services": {name: {"previous", "rolled_to"}}}``),
        or None; ``release`` defaults to this target's (``release_name``)."""
        record: dict[str, Any] | None = self._rollout_store.read_json(self._rollout_key(release or self.release_name()))
        return record

    def roll_out_image(self, image: str | None = None) -> dict[str, Any] | None:
        """Put the head and worker services on ``image`` (default: ``image_reference()``): for each task definition
        they run whose Ray container runs another image, register a revision that runs it, then update the
        services to it (a new deployment each). Does not wait: ``scale_trigger`` waits for ``services_stable``.

        The services' previous revisions are written to the state store before any service changes (a retry of the
        same release keeps the first ones: what ran before the release), for ``roll_back_image``. Returns that
        record, or None when the services already run ``image`` (nothing changed, nothing written).
        """
        from raylift.hooks.ecs_service import image_repository

        ref = image or self.image_reference()
        ecs = self._ecs()
        services = [self.head_service, self.worker_service]
        running = ecs.service_task_definitions(self.cluster, services)
        revisions = ecs.revisions_with_image(sorted(set(running.values())), image_repository(ref), ref)
        moves = {name: (old, revisions[old]) for name, old in running.items() if revisions[old] != old}
        if not moves:
            log.info("ECS services %s in %r already run %s: no rollout", services, self.cluster, ref)
            return None
        release = self.release_name()
        before = self.image_rollout(release) or {}
        earlier = before.get("services") or {}
        record = {
            "image": ref,
            "release": release,
            "at": datetime.now(UTC).isoformat(),
            # what the head served before this release restarted it: a retry keeps the first try's (by then the
            # head it restarted lists nothing)
            "serve_config": before["serve_config"] if "serve_config" in before else self._live_serve_config(),
            "services": {
                **earlier,
                **{
                    name: {"previous": (earlier.get(name) or {}).get("previous", old), "rolled_to": new}
                    for name, (old, new) in moves.items()
                },
            },
        }
        self._rollout_store.write_json(self._rollout_key(release), record)
        for name, (old, new) in sorted(moves.items()):
            deployment = ecs.deploy_revision(self.cluster, name, new)
            log.info("ECS service %s/%s: %s -> %s (deployment %s)", self.cluster, name, old, new, deployment)
        return record

    def _live_serve_config(self) -> dict[str, Any] | None:
        """The Serve config the head runs now, or None when no dashboard answers (the head is stopped)."""
        dashboard = self.serve_dashboard()
        if not dashboard.is_up():
            return None
        config: dict[str, Any] = dashboard.deployed_config(dashboard.serve_applications())
        return config

    def config_lost_in_rollout(self) -> dict[str, Any] | None:
        """The Serve config the head served before this release's image rollout restarted it, if it had apps;
        None outside a release (no writer lease held) or when the release rolled out nothing."""
        if self.held_lease is None:
            return None
        saved = (self.image_rollout() or {}).get("serve_config")
        return saved if saved and saved.get("applications") else None

    def current_serve_config(self) -> dict[str, Any]:
        """The head's Serve config; while the head lists no app and this release's image rollout restarted it,
        the config it served before (``config_lost_in_rollout``): what a deploy merges into, re-submitting every
        app, and what its rollback snapshot keeps."""
        live = super().current_serve_config()
        if live.get("applications"):
            return live
        lost = self.config_lost_in_rollout()
        if lost is None:
            return live
        log.warning(
            "the Ray head on ECS %r lists no Serve app since release %s restarted it on a new image: its "
            "earlier config (apps %s) stands in for it, so the next write re-submits them",
            self.cluster, self.release_name(), [a.get("name") for a in lost["applications"]],
        )
        return lost

    def undo_cluster_change(self) -> ClusterUndo | None:
        """The rollback step's ECS part: put the services this release rolled out back on their previous
        task-definition revisions (``roll_back_image``, which waits for ``services_stable``). If the head went back
        too, it restarted with no Serve app: wait for its dashboard and hand back the Serve config it served before
        the release, for the caller to write (``raylift.release.rollback``). None when this release rolled out no image, or
        outside a release (no writer lease: a run that never took it changed nothing, and a hand rollout is not its
        to undo)."""
        from raylift.targets.base import ClusterUndo

        if self.held_lease is None:
            return None
        record = self.image_rollout()
        if record is None:
            return None
        done = self.roll_back_image()
        saved = record.get("serve_config")
        head = record["services"].get(self.head_service)
        if head is None or not saved or not saved.get("applications"):
            return ClusterUndo(done)  # the head kept its task (and its Serve apps), or it served none before
        now = self._ecs().service_task_definitions(self.cluster, [self.head_service])[self.head_service]
        if now != head["previous"]:
            return ClusterUndo(done)  # left on a revision someone else deployed since: so are its Serve apps
        live = self._wait_for_head(saved)
        if live.get("applications"):  # a retried rollback that re-applied already, or a hand deploy since
            names = [a.get("name") for a in live["applications"]]
            return ClusterUndo(f"{done}; the head lists Serve apps {names} already: left as they are")
        return ClusterUndo(done, reapply=saved)

    def _wait_for_head(self, saved: dict[str, Any]) -> dict[str, Any]:
        """The restarted head's Serve config, once its dashboard answers (up to ``scale_timeout_s``)."""
        deadline = time.monotonic() + self.scale_timeout_s
        while (live := self._live_serve_config()) is None:
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"The Ray head on ECS {self.cluster!r} did not answer on {self.dashboard_url()} within "
                    f"{self.scale_timeout_s:.0f}s of going back to its previous revision: its Serve apps "
                    f"{[a.get('name') for a in saved['applications']]} are not re-applied. Run the rollback again."
                )
            time.sleep(self.scale_poll_interval_s)
        return live

    def roll_back_image(self, release: str | None = None) -> str:
        """Put the services a release rolled out (default: this target's release) back on the task-definition
        revisions they ran before it (a new deployment each), and wait in-process for ``services_stable``.

        A service someone moved to yet another revision since is left there, and said so, as a Serve-config
        rollback leaves a changed app alone. Idempotent: a service already back is left as it is. Returns what
        was done; ClusterError when the services do not settle within ``scale_timeout_s``.
        """
        from raylift.triggers.base import attempts_for

        release = release or self.release_name()
        record = self.image_rollout(release)
        if record is None:
            return f"nothing to roll back: release {release} rolled out no image on ECS cluster {self.cluster!r}"
        ecs = self._ecs()
        planned: dict[str, dict[str, str]] = record["services"]
        now = ecs.service_task_definitions(self.cluster, sorted(planned))
        back: dict[str, str] = {}
        done: list[str] = []
        for name, entry in sorted(planned.items()):
            if now[name] == entry["previous"]:
                done.append(f"{name} already runs {_revision(entry['previous'])}")
            elif now[name] == entry["rolled_to"]:
                back[name] = entry["previous"]
            else:
                done.append(
                    f"{name} left on {_revision(now[name])} (changed since release {release} rolled it to "
                    f"{_revision(entry['rolled_to'])})"
                )
        for name, previous in back.items():
            ecs.deploy_revision(self.cluster, name, previous)
            done.append(f"{name} back on {_revision(previous)} from {_revision(planned[name]['rolled_to'])}")
        if back:
            ecs.wait_for_stable_services(
                self.cluster,
                sorted(back),
                waiter_delay=self.scale_poll_interval_s,
                waiter_max_attempts=attempts_for(self.scale_timeout_s, self.scale_poll_interval_s),
            )
        message = f"ECS cluster {self.cluster!r}: " + "; ".join(done)
        log.warning("image rollback: %s", message)
        return message

    def serves_nothing(self) -> bool:
        """Whether the serving pair serves no Serve app (nothing a change of the cluster could interrupt): its head
        service runs no task, or its head's dashboard lists no app. False when that cannot be told (a running head
        whose dashboard does not answer): then the release keeps what may serve."""
        counts = self._ecs().service_counts(self.cluster, [self.head_service])[self.head_service]
        if counts.desired == 0 and counts.running == 0:
            log.info("ECS service %s/%s runs no head task: nothing serves", self.cluster, self.head_service)
            return True
        try:
            live = self._live_serve_config()
        except ClusterError as exc:  # no Cloud Map instance yet, a dashboard that refuses a read
            log.info("whether the Ray head on ECS %r serves is unknown (%s): treated as serving", self.cluster, exc)
            return False
        if live is None:
            return False
        return not live.get("applications")

    def check_ready(self, want: ClusterExpectation) -> ClusterState:
        """What Ray reports, or ClusterNotReadyError naming what is missing and how many tasks ECS runs.

        A dashboard that does not answer (no connection: refused or timed out) while ECS runs the head task is
        ClusterNotReadyError for ``dashboard_connect_grace_s`` (Ray's dashboard starts some seconds after its
        container), then DashboardUnreachableError naming the security group: not a ClusterError, so the ready
        sensor fails at once rather than poking until its timeout."""
        try:
            state = self.cluster_state()
        except ClusterError:
            self._judge_unreachable()
            raise
        self._unreachable_since = None
        gaps = state.missing(want)
        if gaps:
            counts = self._ecs().service_counts(self.cluster, [self.head_service, self.worker_service])
            tasks = ", ".join(f"{c.name} {c.running}/{c.desired} tasks running" for c in counts.values())
            raise ClusterNotReadyError(
                f"Ray cluster on ECS {self.cluster!r} is missing {', '.join(gaps)} (ECS: {tasks}). "
                "Workers may still be joining, or the capacity provider has too few GPU instances."
            )
        self.ensure_endpoint()  # the user endpoint's name answers with the serving head: registered or moved to it
        return state

    def _judge_unreachable(self) -> None:
        """After a failed dashboard read: DashboardUnreachableError when ECS has run the head task for
        ``dashboard_connect_grace_s`` and no connection to its dashboard port opens; else nothing (the caller's
        ClusterError stands: not ready yet)."""
        try:
            host = self.head_host()
        except ClusterError:
            return  # Cloud Map has no head instance yet: the task is not up
        counts = self._ecs().service_counts(self.cluster, [self.head_service])[self.head_service]
        refused = _no_connection(host, self.dashboard_port, DASHBOARD_CONNECT_TIMEOUT_S)
        if counts.running < 1 or refused is None:
            self._unreachable_since = None
            return  # no head task runs yet, or the port answers (a slow or refusing dashboard: not the network)
        now = time.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
        waited = now - self._unreachable_since
        if waited < self.options.dashboard_connect_grace_s:
            log.info("ECS runs head %s/%s but %s:%d takes no connection yet (%.0f s of %.0f s)", self.cluster,
                     self.head_service, host, self.dashboard_port, waited, self.options.dashboard_connect_grace_s)
            return
        raise DashboardUnreachableError(
            f"ECS runs the Ray head task of {self.cluster}/{self.head_service} ({counts.running} running), but no "
            f"connection to its dashboard {host}:{self.dashboard_port} opens from this Airflow worker ({refused}, "
            f"for {waited:.0f} s): the head's security group lets only its control-plane security groups reach ports "
            f"{self.dashboard_port} (dashboard) and 6379 (GCS). Add the Airflow workers' security group to the "
            "terraform variable airflow_security_group_ids (example stack; module ecs_ray: "
            "control_plane_security_group_ids) and apply, or run Airflow inside the VPC with a route to the head. "
            "(A security group drops what it does not allow, so the connection times out; refused means nothing "
            "listens there: see the head task's logs, or the target option 'dashboard_port'.) Nothing was deployed."
        )

    def billed_nodes(self) -> dict[str, int]:
        """The EC2 instances running the head and worker services' tasks, by instance type: several tasks
        on one instance are one node. Fargate tasks have no instance type to price from the table, and a
        cost without them would be too low, so any makes the cost unknown (ClusterError naming them)."""
        found = self._ecs().service_instances(self.cluster, [self.head_service, self.worker_service])
        if found.fargate_tasks:
            raise ClusterError(
                f"{found.fargate_tasks} task(s) of ECS services {self.head_service} and {self.worker_service} in "
                f"{self.cluster!r} run on Fargate, which the price table (EC2 instance types) cannot price: the "
                "run's cost is unknown rather than too low."
            )
        return found.instance_types

    def instance_shapes(self) -> tuple[InstanceShape, ...]:
        """The EC2 instance types running the head and worker services' tasks (the head serves too), as EC2's
        DescribeInstanceTypes describes them; empty (with a warning) when no task runs on an EC2 instance."""
        from raylift.hooks.ec2_instance_types import Ec2InstanceTypesHook

        found = self._ecs().service_instances(self.cluster, [self.head_service, self.worker_service])
        types = sorted(found.instance_types)
        if not types:
            log.warning(
                "no task of ECS services %s and %s in %r runs on an EC2 instance: their hardware is unknown, so the "
                "serve_config 'auto' takes the CPU profile and a named one is not checked against it",
                self.head_service, self.worker_service, self.cluster,
            )
            return ()
        hook = Ec2InstanceTypesHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)
        return hook.shapes(types)

    def describe_cluster(self) -> str:
        return f"ECS cluster {self.cluster!r} (services {self.head_service}, {self.worker_service})"

    # -- serve -------------------------------------------------------------------------------------
    # -- Serve control (raylift.targets.serve_control): the head Cloud Map finds, the connection's token
    def serve_dashboard(self) -> Any:
        return self._dashboard()

    def serve_dashboard_url(self) -> str:
        return self.dashboard_url()

    def serve_cluster_options(self) -> dict[str, Any]:
        """Serve's proxy on the head: reachable from the VPC (``serve_host``) on ``serve_port``."""
        return {"http_options": {"host": self.serve_host, "port": self.serve_port}}

    def endpoint_url(self) -> str:
        return (self.endpoint or f"http://{self.head_host()}:{self.serve_port}").rstrip("/")

    def teardown(self) -> None:
        """Scale the pair to 0, then take the user endpoint's name off the head that is gone (its Cloud Map instance
        deregistered): it answers nothing until the next ready check registers the next head."""
        ecs = self._ecs()
        ecs.scale_service(self.cluster, self.worker_service, 0)
        ecs.scale_service(self.cluster, self.head_service, 0)
        self.drop_endpoint()


def _no_connection(host: str, port: int, timeout_s: float) -> str | None:
    """Why no TCP connection to ``host:port`` opens within ``timeout_s`` ("timed out": a security group drops the
    packets and nothing answers; "refused": nothing listens there), or None when one opens."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"connect timed out after {timeout_s:.0f} s"
    except ConnectionRefusedError:
        return "connection refused"
    except OSError as exc:
        return f"connect failed: {exc.strerror or exc}"


def _revision(task_definition_arn: str) -> str:
    """``family:revision`` of a task-definition ARN, for messages."""
    return task_definition_arn.rsplit("/", 1)[-1]
