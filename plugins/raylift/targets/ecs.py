"""``ecs``: a Ray cluster as two ECS services (head + workers), found through Cloud Map.

Scaling resizes the services; readiness is first ECS's running count (``EcsServicesRunningTrigger``),
then what the Ray head itself reports (nodes, GPUs). Deploys go through the Serve REST API on the
head, with the serve-app zip in S3 as ``runtime_env.working_dir`` and the image from CodeBuild/ECR.
"""

from __future__ import annotations

import logging
import time
from functools import cached_property
from typing import Any

from raylift.targets.aws import AwsTarget, one_of, split_options
from raylift.errors import ClusterError, ClusterNotReadyError, RayliftValueError
from raylift.records import Artifact, ClusterExpectation, ClusterState

log = logging.getLogger(__name__)


class EcsTarget(AwsTarget):
    """Options (all JSON): ``cluster``, ``head_service``, ``worker_service``, ``head_address`` or
    ``cloud_map_namespace``/``cloud_map_service``, ``dashboard_port``, ``serve_port``, ``serve_host``
    (where Serve's proxy binds on the head), ``endpoint``, ``head_gpus``, ``worker_gpus`` (or
    ``gpus_per_node`` for both), ``image_tag`` (the moving tag the task definitions run, re-pointed
    at each build's content tag), plus the shared AWS options (``bucket``, ``ecr_repository``, ...).
    The names ``raylift_target_options`` of the terraform stack uses are accepted as they are."""

    name = "ecs"

    def __init__(
        self,
        *,
        cluster: str,
        head_service: str = "ray-head",
        worker_service: str = "ray-worker",
        head_address: str | None = None,
        cloud_map_namespace: str | None = None,
        cloud_map_service: str | None = None,
        cloudmap_namespace: str | None = None,
        cloudmap_service: str | None = None,
        dashboard_port: int = 8265,
        serve_port: int = 8000,
        serve_host: str = "0.0.0.0",
        endpoint: str | None = None,
        head_gpus: float | None = None,
        worker_gpus: float | None = None,
        gpus_per_node: float = 4.0,
        image_tag: str | None = None,
        scale_timeout_s: float = 900.0,
        scale_poll_interval_s: float = 10.0,
        **options: Any,
    ) -> None:
        # the stack's names (terraform output -> tools/tf_outputs_to_airflow.py) and ours
        cloud_map_namespace = one_of("cloud_map_namespace", cloud_map_namespace, "cloudmap_namespace", cloudmap_namespace)
        cloud_map_service = one_of("cloud_map_service", cloud_map_service, "cloudmap_service", cloudmap_service) or "head"
        aws, unknown = split_options(options)
        if unknown:
            raise RayliftValueError(f"Unknown ecs target option(s) {sorted(unknown)}: see EcsTarget's docstring.")
        if not head_address and not cloud_map_namespace:
            raise RayliftValueError("The ecs target needs 'head_address' or 'cloud_map_namespace' to find the Ray head.")
        super().__init__(aws)
        self.cluster = cluster
        self.head_service, self.worker_service = head_service, worker_service
        self.head_address, self.cloud_map_namespace, self.cloud_map_service = (
            head_address,
            cloud_map_namespace,
            cloud_map_service,
        )
        self.dashboard_port, self.serve_port, self.endpoint = int(dashboard_port), int(serve_port), endpoint
        self.serve_host = serve_host
        self.head_gpus = float(gpus_per_node if head_gpus is None else head_gpus)
        self.worker_gpus = float(gpus_per_node if worker_gpus is None else worker_gpus)
        self.image_tag = image_tag
        self.scale_timeout_s, self.scale_poll_interval_s = scale_timeout_s, scale_poll_interval_s
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

        return RayDashboardHook(self.dashboard_url())

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

    def cluster_state(self) -> ClusterState:
        return self._dashboard().cluster_state()

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
    def current_serve_config(self) -> dict[str, Any]:
        dashboard = self._dashboard()
        return dashboard.deployed_config(dashboard.serve_applications())

    def apply_serve_config(self, config: dict[str, Any]) -> None:
        # Taken before the PUT: Serve stamps the deploy when it receives it, and the trigger only
        # counts deploys at or after this (a busy worker may create the trigger seconds later).
        self._submitted_at = time.time()
        self._dashboard().put_serve_config(config)

    def deploy_trigger(self, *, app_names: list[str], timeout_s: float) -> Any:
        from raylift.triggers.serve import ServeApplicationsTrigger

        return ServeApplicationsTrigger(
            dashboard_url=self.dashboard_url(),
            app_names=app_names,
            submitted_at=self._submitted_at or time.time(),
            timeout_s=timeout_s,
        )

    def serve_cluster_options(self) -> dict[str, Any]:
        """Serve's proxy on the head: reachable from the VPC (``serve_host``) on ``serve_port``."""
        return {"http_options": {"host": self.serve_host, "port": self.serve_port}}

    def endpoint_url(self) -> str:
        return (self.endpoint or f"http://{self.head_host()}:{self.serve_port}").rstrip("/")

    def teardown(self) -> None:
        ecs = self._ecs()
        ecs.scale_service(self.cluster, self.worker_service, 0)
        ecs.scale_service(self.cluster, self.head_service, 0)
