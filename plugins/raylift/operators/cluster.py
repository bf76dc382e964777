"""Scale the Ray cluster up/down, and tear it down."""

from __future__ import annotations

from typing import Any

from raylift.errors import RayliftValueError
from raylift.operators.base import Stopwatch, TargetOperator


class ScaleClusterOperator(TargetOperator):
    """Start or resize the cluster to ``workers`` worker nodes; the sensor after it waits for them.

    :param workers: Ray worker nodes besides the head (0 allowed); a scale-down drains the nodes it removes."""

    template_fields = (*TargetOperator.template_fields, "workers")

    def __init__(self, *, workers: int | str = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.workers = workers

    def execute(self, context: Any) -> dict[str, Any]:
        try:
            workers = int(self.workers)
        except (TypeError, ValueError):
            raise RayliftValueError(f"'workers' must be an integer >= 0, got {self.workers!r}.") from None
        if workers < 0:
            raise RayliftValueError(f"'workers' must be >= 0, got {workers}.")
        watch = Stopwatch()
        want = self.target_impl.scale(workers=workers)
        self.log.info("cluster scaled to %s worker(s) in %s; expecting %s", workers, watch, want)
        return want.to_xcom()


class TeardownOperator(TargetOperator):
    """Scale to zero and stop what raylift started. Idempotent."""

    def execute(self, context: Any) -> None:
        from raylift.serve_writer import cluster_lock

        watch = Stopwatch()
        with cluster_lock(self.target_impl):  # never in the middle of another step's Serve config write
            self.target_impl.teardown()
        self.log.info("target %s torn down in %s", self.target, watch)


class UndeployAppOperator(TargetOperator):
    """Remove one Serve application and keep the cluster and every other app (``serve shutdown`` for one app).

    The write goes through the cluster's Serve-config lock (``raylift.serve_writer``); the task returns
    once Serve no longer lists the app. The app's last good config stays in the state store, so a
    later ``raylift_redeploy`` can bring it back.

    :param app_name: the Serve application to remove.
    :param timeout_s: how long to wait for Serve to stop listing it.
    """

    template_fields = (*TargetOperator.template_fields, "app_name")

    def __init__(self, *, app_name: str, timeout_s: float = 300.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app_name, self.timeout_s = app_name, timeout_s

    def execute(self, context: Any) -> dict[str, Any]:
        import time

        from raylift.serve_config import app_by_name
        from raylift.serve_writer import update_serve_config

        name = str(self.app_name)
        if not name:
            raise RayliftValueError("'app_name' is empty: name the Serve application to remove.")
        watch = Stopwatch()
        found: list[bool] = []

        def without(current: dict[str, Any]) -> dict[str, Any]:
            found.append(app_by_name(current, name) is not None)
            if not found[-1]:
                return current
            return {**current, "applications": [a for a in current.get("applications", []) if a.get("name") != name]}

        target = self.target_impl
        if not app_by_name(target.current_serve_config(), name):
            self.log.info("Serve app %r is not deployed; nothing to remove", name)
            return {"app_name": name, "removed": False}
        config = update_serve_config(target, without)
        others = [a.get("name") for a in config.get("applications", [])]
        deadline = time.monotonic() + self.timeout_s
        while app_by_name(target.current_serve_config(), name) is not None or self._listed(name):
            if time.monotonic() > deadline:
                raise RayliftValueError(f"Serve still lists app {name!r} {self.timeout_s:.0f}s after it was removed.")
            time.sleep(1)
        self.log.info("removed Serve app %r in %s; still deployed: %s", name, watch, others or "no other app")
        return {"app_name": name, "removed": True, "remaining": others}

    def _listed(self, name: str) -> bool:
        """Whether Serve still reports the app (it lists it as DELETING while its replicas stop)."""
        dashboard = getattr(self.target_impl, "dashboard", None)
        if dashboard is None:
            return False
        return name in (dashboard.serve_applications().get("applications") or {})
