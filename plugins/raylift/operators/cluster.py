"""Scale the Ray cluster up/down, and tear it down."""

from __future__ import annotations

from typing import Any

from raylift.config import default_deferrable
from raylift.errors import DeployError, RayliftValueError
from raylift.operators.base import Stopwatch, TargetOperator


class ScaleClusterOperator(TargetOperator):
    """Start or resize the cluster to ``workers`` worker nodes; the sensor after it waits for them.

    A scale-in on a target that drains first (``ecs``, ``eks``: ``raylift.targets.scale_in``) picks the worker
    nodes to remove from Ray's state, asks Ray to drain them, waits until Ray lists them DEAD (deferred: the
    triggerer waits) and only then removes exactly their tasks or instances. A drain that does not finish by the
    target's ``drain_timeout_s`` fails the step naming the nodes, with the capacity unchanged.

    :param workers: Ray worker nodes besides the head (0 allowed). A count the cluster's capacity cannot hold (on
        ``eks``: past the worker node group's maxSize, which raylift never raises) is refused before anything is
        resized.
    :param deferrable: free the worker slot while Ray drains (the triggerer waits); False waits in the worker on
        the same condition. None takes Airflow's ``[operators] default_deferrable``.
    :param release: the run's ``release`` Param, None outside a release: a change of the cluster itself (a new
        image) is carried out here, in place, only for ``direct`` (``raylift.release.plan.replaced_in_place``);
        otherwise the deploy step releases it blue/green."""

    template_fields = (*TargetOperator.template_fields, "workers", "release")

    def __init__(self, *, workers: int | str = 0, deferrable: bool | None = None, release: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.workers = workers
        self.release = release
        self.deferrable = default_deferrable(deferrable)

    def execute(self, context: Any) -> dict[str, Any]:

        try:
            workers = int(self.workers)
        except (TypeError, ValueError):
            raise RayliftValueError(f"'workers' must be an integer >= 0, got {self.workers!r}.") from None
        if workers < 0:
            raise RayliftValueError(f"'workers' must be >= 0, got {workers}.")
        from raylift.release.plan import replaced_in_place

        watch = Stopwatch()
        target = self.target_impl
        target.cluster_change_in_place = replaced_in_place(self.release)
        plan = target.scale_in_plan(workers)
        if plan is None:  # a scale-out, the same count, or a target that does not drain
            want = target.scale(workers=workers)
            self.log.info("cluster scaled to %s worker(s) in %s; expecting %s", workers, watch, want)
            return want.to_xcom()
        trigger = target.start_drain(plan)
        if trigger is None:  # the members to remove never joined Ray: nothing to drain
            return self.execute_complete(context, None, plan=plan.to_xcom())
        if self.deferrable:
            from datetime import timedelta

            self.defer(trigger=trigger, method_name="execute_complete", kwargs={"plan": plan.to_xcom()},
                       timeout=timedelta(seconds=trigger.timeout_s + 60))
        return self.execute_complete(context, trigger.wait(), plan=plan.to_xcom())  # same condition, in this worker

    def execute_complete(self, context: Any, event: dict[str, Any] | None, plan: dict[str, Any]) -> dict[str, Any]:
        """After the drain: remove exactly the drained members and resize (ClusterError when it did not finish)."""
        from raylift.targets.scale_in import ScaleInPlan

        target = self.target_impl
        scale_in = ScaleInPlan.from_xcom(plan)
        want = target.finish_scale_in(scale_in, event)
        self.log.info("cluster scaled in to %s worker(s), removing %s after Ray drained them; expecting %s",
                      scale_in.workers, ", ".join(scale_in.members), want)
        return want.to_xcom()


class TeardownOperator(TargetOperator):
    """Scale to zero and stop what raylift started. Idempotent.

    First pauses the cluster's scheduled and asset-triggered redeploys (a marker in its state store, with who and
    when), so an unpaused raylift_redeploy does not scale it back up; the next raylift_deploy run on it that passes
    removes the marker."""

    def execute(self, context: Any) -> None:
        from raylift.operators.redeploy import pause_redeploys, paused_key
        from raylift.release.writer import cluster_lock

        watch = Stopwatch()
        target = self.target_impl
        store = target.state_store()
        pause_redeploys(store, target.cluster_key(), context)
        self.log.info("redeploys of %s paused until its next deploy passes (%s)", target.cluster_key(),
                      store.child_uri(paused_key(target.cluster_key())))
        with cluster_lock(target):  # never in the middle of another step's Serve config write
            target.teardown()
        self.log.info("target %s torn down in %s", self.target, watch)


class UndeployAppOperator(TargetOperator):
    """Remove one Serve application and keep the cluster and every other app (``serve shutdown`` for one app).

    The write goes through the cluster's Serve-config lock (``raylift.release.writer``); the task ends once
    Serve no longer lists the app (the target's ``undeploy_trigger``: Serve shows it DELETING while its
    replicas drain). The app's last good config stays in the state store, so a later ``raylift_redeploy``
    can bring it back.

    :param app_name: the Serve application to remove.
    :param timeout_s: how long to wait for Serve to stop listing it.
    :param deferrable: free the worker slot while the replicas drain (the triggerer waits); False waits in the
        worker on the same condition (the trigger's ``wait()``). None takes Airflow's
        ``[operators] default_deferrable``.
    """

    template_fields = (*TargetOperator.template_fields, "app_name")

    def __init__(self, *, app_name: str, timeout_s: float = 300.0, deferrable: bool | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app_name, self.timeout_s = app_name, timeout_s
        self.deferrable = default_deferrable(deferrable)

    def execute(self, context: Any) -> dict[str, Any]:
        from raylift.release.writer import update_serve_config
        from raylift.serve.config import app_by_name

        name = str(self.app_name)
        if not name:
            raise RayliftValueError("'app_name' is empty: name the Serve application to remove.")
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
        others = [str(a.get("name")) for a in config.get("applications", [])]
        trigger = target.undeploy_trigger(app_name=name, timeout_s=self.timeout_s)
        if trigger is None:  # the config write was the removal (a RayService spec)
            return self.execute_complete(context, {"status": "success"}, remaining=others)
        if self.deferrable:
            from datetime import timedelta

            self.defer(trigger=trigger, method_name="execute_complete", kwargs={"remaining": others},
                       timeout=timedelta(seconds=self.timeout_s + 60))
        return self.execute_complete(context, trigger.wait(), remaining=others)  # same condition, in this worker

    def execute_complete(self, context: Any, event: dict[str, Any], remaining: list[str]) -> dict[str, Any]:
        name = str(self.app_name)
        if event.get("status") != "success":
            raise DeployError(f"Serve app {name!r} was removed from the Serve config, but: {event.get('message')}. "
                              "The other apps were not touched; look at the app's replicas in the Ray dashboard.")
        self.log.info("removed Serve app %r; still deployed: %s", name, remaining or "no other app")
        return {"app_name": name, "removed": True, "remaining": remaining}
