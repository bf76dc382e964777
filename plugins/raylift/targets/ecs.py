"""``ecs``: a Ray cluster as two ECS services (head + workers), found through Cloud Map.

Scaling resizes the services; readiness is first ECS's running count (``EcsServicesRunningTrigger``),
then what the Ray head itself reports (nodes, GPUs). Deploys go through the Serve REST API on the
head, with the serve-app zip in S3 as ``runtime_env.working_dir`` and the image from CodeBuild/ECR.
"""

from __future__ import annotations

import time
from functools import cached_property
from typing import Any

from raylift.aws.target_common import AwsTarget, split_options
from raylift.errors import ClusterNotReadyError, RayliftValueError
from raylift.targets.base import ClusterExpectation, ClusterState


class EcsTarget(AwsTarget):
    """Options (all JSON): ``cluster``, ``head_service``, ``worker_service``, ``head_address`` or
    ``cloud_map_namespace``/``cloud_map_service``, ``dashboard_port``, ``serve_port``, ``endpoint``,
    ``head_gpus``, ``worker_gpus``, plus the shared AWS options (``bucket``, ``ecr_repository``, ...)."""

    name = "ecs"

    def __init__(
        self,
        *,
        cluster: str,
        head_service: str = "ray-head",
        worker_service: str = "ray-worker",
        head_address: str | None = None,
        cloud_map_namespace: str | None = None,
        cloud_map_service: str = "ray-head",
        dashboard_port: int = 8265,
        serve_port: int = 8000,
        endpoint: str | None = None,
        head_gpus: float = 4.0,
        worker_gpus: float = 4.0,
        scale_timeout_s: float = 900.0,
        **options: Any,
    ) -> None:
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
        self.dashboard_port, self.serve_port, self.endpoint = dashboard_port, serve_port, endpoint
        self.head_gpus, self.worker_gpus = float(head_gpus), float(worker_gpus)
        self.scale_timeout_s = scale_timeout_s

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

    def scale_trigger(self, *, workers: int, timeout_s: float | None = None, poll_interval_s: float = 10.0) -> Any:
        """Defer until the head and ``workers`` worker tasks run (then ask Ray with cluster_state)."""
        from raylift.triggers.ecs import EcsServicesRunningTrigger

        return EcsServicesRunningTrigger(
            self.cluster,
            {self.head_service: 1, self.worker_service: workers},
            aws_conn_id=self.aws.aws_conn_id,
            region_name=self.aws.region_name,
            poll_interval_s=poll_interval_s,
            timeout_s=timeout_s or self.scale_timeout_s,
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

    # -- serve -------------------------------------------------------------------------------------
    def current_serve_config(self) -> dict[str, Any]:
        dashboard = self._dashboard()
        return dashboard.deployed_config(dashboard.serve_applications())

    def apply_serve_config(self, config: dict[str, Any]) -> None:
        self._dashboard().put_serve_config(config)

    def deploy_trigger(self, *, app_names: list[str], timeout_s: float) -> Any:
        from raylift.triggers.serve import ServeApplicationsTrigger

        return ServeApplicationsTrigger(
            dashboard_url=self.dashboard_url(), app_names=app_names, submitted_at=time.time(), timeout_s=timeout_s
        )

    def endpoint_url(self) -> str:
        return (self.endpoint or f"http://{self.head_host()}:{self.serve_port}").rstrip("/")

    def teardown(self) -> None:
        ecs = self._ecs()
        ecs.scale_service(self.cluster, self.worker_service, 0)
        ecs.scale_service(self.cluster, self.head_service, 0)
