"""``ecs``: a Ray cluster as two ECS services (head + workers), found through Cloud Map.

Scaling resizes the services; readiness is first ECS's running count (``EcsServicesRunningTrigger``),
then what the Ray head itself reports (nodes, GPUs). Deploys go through the Serve REST API on the
head, with the serve-app zip in S3 as ``runtime_env.working_dir`` and the image from CodeBuild/ECR.
"""

from __future__ import annotations

import logging
from functools import cached_property
from typing import Annotated, Any, ClassVar, Self

from pydantic import Field, model_validator

from raylift.errors import ClusterError, ClusterNotReadyError, RayliftValueError
from raylift.records import Artifact, ClusterExpectation, ClusterState
from raylift.targets.aws import AwsOptions, AwsTarget, PositiveSeconds
from raylift.targets.serve_control import DashboardServeControl

log = logging.getLogger(__name__)


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
    dashboard_port: Port = 8265
    serve_port: Port = 8000
    serve_host: str = Field("0.0.0.0", min_length=1)  # where Serve's proxy binds on the head
    endpoint: str | None = None
    head_gpus: Gpus | None = None  # None: gpus_per_node
    worker_gpus: Gpus | None = None  # None: gpus_per_node
    gpus_per_node: Gpus = 4.0
    image_tag: str | None = Field(None, min_length=1)
    scale_timeout_s: PositiveSeconds = 900.0
    scale_poll_interval_s: PositiveSeconds = 10.0

    @model_validator(mode="after")
    def _finds_the_head(self) -> Self:
        if not self.head_address and not self.cloud_map_namespace:
            raise ValueError("The ecs target needs 'head_address' or 'cloud_map_namespace' to find the Ray head.")
        return self


class EcsTarget(DashboardServeControl, AwsTarget):
    """Options (all JSON, validated by ``EcsOptions``): ``cluster``, ``head_service``, ``worker_service``,
    ``head_address`` or ``cloud_map_namespace``/``cloud_map_service``, ``dashboard_port``, ``serve_port``,
    ``serve_host`` (where Serve's proxy binds on the head), ``endpoint``, ``head_gpus``, ``worker_gpus`` (or
    ``gpus_per_node`` for both), ``image_tag`` (the moving tag the task definitions run, re-pointed at each
    build's content tag), plus the shared AWS options (``bucket``, ``ecr_repository``, ...)."""

    name = "ecs"

    def __init__(self, **options: Any) -> None:
        """Keyword arguments are the DAG's ``target_options``; refused as a whole before anything is touched."""
        opts = EcsOptions.parse(options)
        super().__init__(opts)
        self.options = opts
        self.cluster = opts.cluster
        self.head_service, self.worker_service = opts.head_service, opts.worker_service
        self.head_address, self.cloud_map_namespace, self.cloud_map_service = (
            opts.head_address,
            opts.cloud_map_namespace,
            opts.cloud_map_service,
        )
        self.dashboard_port, self.serve_port, self.endpoint = opts.dashboard_port, opts.serve_port, opts.endpoint
        self.serve_host = opts.serve_host
        self.head_gpus = opts.gpus_per_node if opts.head_gpus is None else opts.head_gpus
        self.worker_gpus = opts.gpus_per_node if opts.worker_gpus is None else opts.worker_gpus
        self.image_tag = opts.image_tag
        self.scale_timeout_s, self.scale_poll_interval_s = opts.scale_timeout_s, opts.scale_poll_interval_s
        self._submitted_at: float | None = None  # when this task last submitted a Serve config

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
        """Re-point the moving ``image_tag`` the task definitions run at this build's content tag."""
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
        ecs.scale_service(self.cluster, self.head_service, 1)
        ecs.scale_service(self.cluster, self.worker_service, workers)
        return self.expectation(workers)

    def cluster_ready_trigger(self, want: ClusterExpectation) -> Any:
        """Defer until ECS runs the head and worker services' desired counts, which ``scale`` set for ``want``
        (whether Ray has ``want``'s nodes is asked afterwards, with check_ready)."""
        return self.scale_trigger()

    def scale_trigger(self, *, timeout_s: float | None = None, poll_interval_s: float | None = None) -> Any:
        """Defer until the head and worker services run their desired counts (``scale`` set them to 1 and
        the workers); then ask Ray with cluster_state."""
        from raylift.triggers.base import attempts_for
        from raylift.triggers.ecs import EcsServicesRunningTrigger

        delay = poll_interval_s or self.scale_poll_interval_s
        return EcsServicesRunningTrigger(
            self.cluster,
            [self.head_service, self.worker_service],
            waiter_delay=delay,
            waiter_max_attempts=attempts_for(timeout_s or self.scale_timeout_s, delay),
            aws_conn_id=self.aws.aws_conn_id,
            region_name=self.aws.region_name,
        )

    def check_ready(self, want: ClusterExpectation) -> ClusterState:
        """What Ray reports, or ClusterNotReadyError naming what is missing and how many tasks ECS runs."""
        state = self.cluster_state()
        gaps = state.missing(want)
        if gaps:
            counts = self._ecs().service_counts(self.cluster, [self.head_service, self.worker_service])
            tasks = ", ".join(f"{c.name} {c.running}/{c.desired} tasks running" for c in counts.values())
            raise ClusterNotReadyError(
                f"Ray cluster on ECS {self.cluster!r} is missing {', '.join(gaps)} (ECS: {tasks}). "
                "Workers may still be joining, or the capacity provider has too few GPU instances."
            )
        return state

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
        ecs = self._ecs()
        ecs.scale_service(self.cluster, self.worker_service, 0)
        ecs.scale_service(self.cluster, self.head_service, 0)
