"""The deploy's record of each replica it started, by phase: read after RUNNING, observed only.

Why a step of its own: the cold start is most of a release's wait on a new model, and vLLM, Serve and Ray each time
their own part (``raylift.serve.cold_start`` parses them); a cluster or log that cannot be read leaves a ``note`` and
the deploy stands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# How far the Airflow worker's and the API server's clocks may disagree (both NTP-synced on AWS: Amazon Time Sync):
# a pod created this long before the deploy's config write still counts as one the deploy started.
CLOCK_SKEW_S = 30.0


class ColdStartMixin:
    """For ``ServeDeployOperator``: the replicas' cold start after the app is RUNNING, kept as the run's
    ``cold_start.json`` (the benchmark report's table)."""

    if TYPE_CHECKING:  # provided by ServeDeployOperator, TargetOperator and BaseOperator
        app_name: Any
        log: Any
        target_impl: Any

        def state_for(self, app_name: str) -> Any: ...

    def collect_cold_start(self, app_name: str, running_at: float, run_id: str,
                           deploy_steps: dict[str, float] | None = None, note: str | None = None) -> dict[str, Any]:
        """Each replica this deploy started, by phase (``raylift.serve.cold_start``: Ray's placement, Serve's constructor,
        vLLM's own timings), one task-log line each, also kept as the run's ``cold_start.json`` (the benchmark
        report's table), with this step's own phases (``deploy_steps_s``) and, on a target whose Ray nodes are pods
        (``PodStartReader``: EKS), each pod the deploy started (``pods``). ``note``: why the replicas are not read
        (a blue/green candidate on another cluster). Only observed: a cluster or log that cannot be read leaves a
        ``note``; the deploy stands."""
        from raylift.release.state import run_file

        cold: dict[str, Any] = ({"app": app_name, "replicas": [], "note": note} if note is not None
                else self._read_cold_start(app_name, running_at))
        pods = self._read_pod_cold_start(running_at, deploy_steps or {})
        if pods is not None:
            cold["pods"] = pods
        if deploy_steps:
            cold["deploy_steps_s"] = deploy_steps
        try:
            self.state_for(str(self.app_name)).store.write_json(run_file(run_id, "cold_start"), cold)
        except Exception as exc:  # the XCom still has it
            self.log.warning("cold_start.json not written (%s: %s)", type(exc).__name__, exc)
        return cold

    def _read_pod_cold_start(self, running_at: float, steps: dict[str, float]) -> list[dict[str, Any]] | None:
        """The pods this deploy started (those created since its config write, less ``CLOCK_SKEW_S``), one task-log
        line each; None where the target has no pods to read or they cannot be read (said in the log)."""
        from raylift.kuberay.cold_start import summary_line
        from raylift.targets.base import PodStartReader

        target = self.target_impl
        if not isinstance(target, PodStartReader):
            return None
        since = running_at - float(steps.get("serve_to_running_s") or 0.0) - float(steps.get("serve_write_s") or 0.0)
        try:
            pods = target.pod_cold_start(since - CLOCK_SKEW_S)
        except Exception as exc:  # observed only: the deploy stands
            self.log.warning("cold start of the Ray pods not read (%s: %s)", type(exc).__name__, exc)
            return None
        for pod in pods:
            self.log.info("cold start: %s", summary_line(pod))
        if not pods:
            self.log.info("cold start: this deploy started no Ray pod (Serve's config changed on the running ones)")
        return pods

    def _read_cold_start(self, app_name: str, running_at: float) -> dict[str, Any]:
        from raylift.hooks.ray_replica_logs import read_cold_start

        try:
            dashboard = self.target_impl.serve_dashboard()  # None: a target that reaches Serve otherwise
        except NotImplementedError:
            dashboard = None
        if dashboard is None:
            return {"app": app_name, "replicas": [], "note": "this target has no Ray dashboard to read replicas from"}
        return read_cold_start(dashboard, app_name, running_at, log=self.log)
