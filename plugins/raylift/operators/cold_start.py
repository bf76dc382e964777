"""The deploy's record of each replica it started, by phase: read after RUNNING, observed only.

Why a step of its own: the cold start is most of a release's wait on a new model, and vLLM, Serve and Ray each time
their own part (``raylift.serve.cold_start`` parses them); a cluster or log that cannot be read leaves a ``note`` and
the deploy stands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any


class ColdStartMixin:
    """For ``ServeDeployOperator``: the replicas' cold start after the app is RUNNING, kept as the run's
    ``cold_start.json`` (the benchmark report's table)."""

    if TYPE_CHECKING:  # provided by ServeDeployOperator, TargetOperator and BaseOperator
        app_name: Any
        log: Any
        target_impl: Any

        def state_for(self, app_name: str) -> Any: ...

    def collect_cold_start(self, app_name: str, running_at: float, run_id: str,
                           deploy_steps: dict[str, float] | None = None) -> dict[str, Any]:
        """Each replica this deploy started, by phase (``raylift.serve.cold_start``: Ray's placement, Serve's constructor,
        vLLM's own timings), one task-log line each, also kept as the run's ``cold_start.json`` (the benchmark
        report's table), with this step's own phases (``deploy_steps_s``). Only observed: a cluster or log that
        cannot be read leaves a ``note``; the deploy stands."""
        from raylift.release.state import run_file

        cold = self._read_cold_start(app_name, running_at)
        if deploy_steps:
            cold["deploy_steps_s"] = deploy_steps
        try:
            self.state_for(str(self.app_name)).store.write_json(run_file(run_id, "cold_start"), cold)
        except Exception as exc:  # the XCom still has it
            self.log.warning("cold_start.json not written (%s: %s)", type(exc).__name__, exc)
        return cold

    def _read_cold_start(self, app_name: str, running_at: float) -> dict[str, Any]:
        from raylift.hooks.ray_replica_logs import read_cold_start

        try:
            dashboard = self.target_impl.serve_dashboard()  # None: a target that reaches Serve otherwise
        except NotImplementedError:
            dashboard = None
        if dashboard is None:
            return {"app": app_name, "replicas": [], "note": "this target has no Ray dashboard to read replicas from"}
        return read_cold_start(dashboard, app_name, running_at, log=self.log)
