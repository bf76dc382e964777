"""Start-before-stop rollouts on top of Ray Serve's rolling update.

Ray Serve 2.60, at its default ``max_surge_percent: 0``, replaces replicas in waves of
``max(20 % of num_replicas, 1)`` and stops each old replica *before* its replacement starts; only
while fewer replicas run than the target does it hold off stopping. So a code update of a 1-replica app (the common case on a small cluster) leaves
no replica to answer until the new one has loaded its model: a minute or more of failed requests.

raylift therefore applies a code update with ``num_replicas + surge``: Serve first *adds* the
missing replica (of the new version) and stops an old one only once the new one is RUNNING, so
the number of serving replicas never drops below what was asked for. Once the app is RUNNING the
final config (the real replica count) is applied: a lightweight update that stops the surplus
replica gracefully. If the new version never starts, the old replicas were never stopped, and a
rollback to them is a lightweight update too.

Ray 2.60 also has a per-deployment ``max_surge_percent`` that does this natively. raylift keeps its
own surge because it behaves the same on every Serve version a cluster (ECS image, KubeRay) runs,
and the integration tests prove it. Moving to the native field is a follow-up.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

from raylift.config import ROLLOUT_SURGE_REPLICAS
from raylift.serve_config import app_by_name, merge_app
from raylift.targets.base import Target

log = logging.getLogger(__name__)

# Changing only these keeps the running replicas (Serve's "lightweight config updates"); any other
# difference is a code update that restarts replicas.
LIGHTWEIGHT_APP_KEYS = frozenset({"name", "route_prefix", "deployments", "logging_config"})
LIGHTWEIGHT_DEPLOYMENT_KEYS = frozenset(
    {
        "name",
        "num_replicas",
        "autoscaling_config",
        "user_config",
        "max_ongoing_requests",
        "max_queued_requests",
        "graceful_shutdown_timeout_s",
        "graceful_shutdown_wait_loop_s",
        "health_check_period_s",
        "health_check_timeout_s",
        "request_router_config",
        "logging_config",
    }
)


def _heavy(entry: dict[str, Any], lightweight: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in lightweight}


def restarts_replicas(old_app: dict[str, Any] | None, new_app: dict[str, Any]) -> bool:
    """Whether going from ``old_app`` to ``new_app`` is a code update (replicas restart)."""
    if old_app is None:
        return False  # a new app: nothing is serving that could go dark
    if _heavy(old_app, LIGHTWEIGHT_APP_KEYS) != _heavy(new_app, LIGHTWEIGHT_APP_KEYS):
        return True
    old_deps = {d.get("name"): d for d in old_app.get("deployments", [])}
    for dep in new_app.get("deployments", []):
        before = old_deps.get(dep.get("name"), {})
        if _heavy(before, LIGHTWEIGHT_DEPLOYMENT_KEYS) != _heavy(dep, LIGHTWEIGHT_DEPLOYMENT_KEYS):
            return True
        # Values inside num_replicas or autoscaling_config are lightweight, but switching between a fixed
        # count and autoscaling deploys a new version: Serve 2.60 logs "Stopping 1 replicas ... with
        # outdated versions" and restarts them (measured under load in tests/integration/test_local_pipeline).
        if bool(before.get("autoscaling_config")) != bool(dep.get("autoscaling_config")):
            return True
    return False


def with_surge(app: dict[str, Any], extra: int) -> dict[str, Any]:
    """``app`` asking for ``extra`` more replicas per deployment (fixed counts and autoscaling floors)."""
    surged = copy.deepcopy(app)
    for dep in surged.get("deployments", []):
        auto = dep.get("autoscaling_config")
        if isinstance(auto, dict):
            auto["min_replicas"] = int(auto.get("min_replicas", 1)) + extra
            auto["max_replicas"] = max(int(auto.get("max_replicas", 1)), auto["min_replicas"])
        elif int(dep.get("num_replicas", 1)) > 0:
            dep["num_replicas"] = int(dep.get("num_replicas", 1)) + extra
    return surged


def surge_config(
    current: dict[str, Any], config: dict[str, Any], app_name: str, *, extra: int = ROLLOUT_SURGE_REPLICAS
) -> dict[str, Any] | None:
    """The config to apply first so ``app_name`` never has fewer serving replicas than asked for,
    or None when ``config`` can be applied as is (new app, lightweight change, surge disabled)."""
    new_app = app_by_name(config, app_name)
    if extra <= 0 or new_app is None or not restarts_replicas(app_by_name(current, app_name), new_app):
        return None
    return merge_app(config, with_surge(new_app, extra), defaults=config)


def settle(target: Target, final: dict[str, Any], app_name: str) -> None:
    """After a surged rollout is RUNNING: apply ``app_name`` as finally configured (a lightweight
    update that gracefully stops the surplus replicas), keeping whatever else runs now."""
    from raylift.serve_writer import update_serve_config

    app = app_by_name(final, app_name)
    if app is None:
        return
    update_serve_config(target, lambda current: merge_app(current, app, defaults=final))
    log.info("rollout: app %r back to its configured replica count after a start-before-stop update", app_name)


def wait_for_apps(target: Target, app_names: list[str], timeout_s: float) -> dict[str, Any]:
    """Run the target's deploy trigger to its first event, in this process (for steps that must
    finish a rollout before they return, such as a rollback)."""
    trigger = target.deploy_trigger(app_names=app_names, timeout_s=timeout_s)

    async def first_event() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        return {"status": "error", "message": "the deploy trigger ended without an event"}

    return asyncio.run(first_event())


def apply_with_surge(
    target: Target, config: dict[str, Any], app_name: str, *, timeout_s: float, extra: int = ROLLOUT_SURGE_REPLICAS,
    read: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Apply ``config`` (built from ``read``, the cluster's config the caller read) start-before-stop and
    wait until ``app_name`` is RUNNING (blocking); refused if the cluster's config changed since ``read``.

    Returns the trigger's event; on failure the surged config stays applied, so the caller decides
    what to restore (the old replicas were never stopped)."""
    from raylift.serve_writer import write_serve_config

    read = target.current_serve_config() if read is None else read
    surged = surge_config(read, config, app_name, extra=extra)
    write_serve_config(target, surged or config, read=read)
    event = wait_for_apps(target, [app_name], timeout_s)
    if surged is not None and event.get("status") == "success":
        settle(target, config, app_name)
    return event
