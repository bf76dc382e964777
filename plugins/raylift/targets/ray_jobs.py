"""Checks that run where a cluster's Ray is, as Ray jobs on its head (the ``ray`` target's cluster, ECS's head).

Why jobs: raylift reaches such a cluster only through its dashboard (the token is checked there; the GCS port is not
open to the Airflow workers), and what is checked must be judged by the cluster's own Ray and vLLM, not by a copy
in the Airflow worker (which has none: managed Airflow pins another Ray than a user's cluster runs).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from raylift.config import RAY_JOB_TIMEOUT_S
from raylift.errors import ClusterError
from raylift.targets.serve_control import DashboardServeControl


class RayJobChecks(DashboardServeControl):
    """Mixin for a target whose Serve is reached through a Ray dashboard it can submit jobs to: Ray jobs on the head,
    submitted and awaited through the dashboard's Jobs REST API with the dashboard's own token; Ray's Serve schema
    check (``raylift.targets.base.ServeSchemaChecker``) is one."""

    def run_job(self, entrypoint: str, runtime_env: dict[str, Any] | None = None,
                timeout_s: float = RAY_JOB_TIMEOUT_S) -> tuple[str, str]:
        """Run ``entrypoint`` on the cluster's head node and wait for it; returns (final status, logs)."""
        from raylift.triggers.ray_job import RayJobFinishedTrigger

        dashboard = self.serve_dashboard()
        job = dashboard.submit_job(entrypoint, runtime_env)
        event = RayJobFinishedTrigger(self.serve_dashboard_url(), job, timeout_s=timeout_s,
                                      **self.dashboard_trigger_auth()).wait()
        if event["status"] != "success":
            raise ClusterError(
                f"{event['message']}: is the cluster's head busy or short of CPU, or its dashboard down? "
                "Nothing was deployed."
            )
        return str(event["job_status"]), dashboard.job_logs(job)

    def check_serve_schema(self, config: dict[str, Any], app_name: str) -> list[str]:
        """Ray's models on the cluster judge ``config`` (``raylift/serve/ray_schema_check.py`` as ``python -c``, a
        Ray job of a few seconds): its Ray version's rules, whatever Ray this worker has (none)."""
        from raylift.serve.validation import schema_script_source, schema_verdict, schema_warnings

        url = self.serve_dashboard_url()
        status, logs = self.run_job(shlex.join(["python", "-c", schema_script_source(), json.dumps(config), app_name]))
        verdict = schema_verdict(logs)
        if status != "SUCCEEDED" or verdict is None:
            raise ClusterError(
                f"Could not check the Serve config with the Ray of the cluster at {url} (job {status}): "
                f"{logs[-500:]} Nothing was deployed."
            )
        return schema_warnings(verdict, f"the cluster at {url}")
