"""Start-before-stop rollouts, with Ray Serve's own ``max_surge_percent``.

Ray Serve 2.60, at its default ``max_surge_percent: 0``, replaces replicas in waves of
``max(20 % of num_replicas, 1)`` and stops each old replica *before* its replacement starts. So a code
update of a 1-replica app (the common case on a small cluster) leaves no replica to answer until the new
one has loaded its model: requests wait in the proxy (3.5 s for the tiny T5 in ``bench/rollout_surge.py``,
a minute or more for an LLM) or fail.

raylift sets each deployment's ``max_surge_percent`` so that Serve may run ``surge`` extra replicas during a
rolling restart: it starts a replacement first and stops an old replica only once the replacement runs, so
the serving replicas never drop below what was asked for. If a new version never starts, the old replicas
keep serving. The field is a lightweight option (changing it restarts nothing).

Until this change raylift did the same by hand: it applied ``num_replicas + surge``, waited for RUNNING, then
applied the real count. ``bench/rollout_surge.py`` compared the two under load (translator, 1 replica, 8
requests/s, 4 updates each): 0 failed requests both, longest wait 0.08 s (raylift's) vs 0.09 s (native),
update 14.4 vs 11.3 s (median; one config write instead of two, no settle step). raylift's did not win, so
the native field replaced it. Without either, the same updates failed no request either but held one for
3.4-3.6 s: Serve's proxy queues requests while no replica serves.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

from raylift.config import ROLLOUT_SURGE_REPLICAS
from raylift.errors import ServeFitError
from raylift.serve.config import app_by_name, merge_app
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
        "max_surge_percent",
        "rolling_update_percentage",
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


def surge_percent(extra: int, replicas: int) -> int:
    """A ``max_surge_percent`` for which Serve allows exactly ``extra`` surge replicas over ``replicas`` (Serve
    rounds ``percent * replicas / 100`` up): ``100 * extra / replicas`` rounded down, as a person would write it
    (100 for one more of one), raised to the least that works past 100 replicas; at most 100."""
    if extra <= 0:
        return 0
    replicas = max(replicas, 1)
    percent = 100 * extra // replicas
    if (percent * replicas + 99) // 100 < extra:
        percent = -(-(100 * (extra - 1) + 1) // replicas)
    return min(100, percent)


def replica_floor(deployment: dict[str, Any]) -> int:
    """The replicas a deployment config keeps running: its fixed count, or its autoscaling floor (Serve's
    defaults: 1)."""
    auto = deployment.get("autoscaling_config")
    return int(auto.get("min_replicas", 1)) if isinstance(auto, dict) else int(deployment.get("num_replicas", 1))


def with_native_surge(app: dict[str, Any], extra: int) -> dict[str, Any]:
    """``app`` with each deployment's ``max_surge_percent`` set for ``extra`` surge replicas (its fixed count,
    or its autoscaling floor); ``extra`` 0 leaves Serve's default (stop-before-start)."""
    out = copy.deepcopy(app)
    if extra <= 0:
        return out
    for dep in out.get("deployments", []):
        dep["max_surge_percent"] = surge_percent(extra, replica_floor(dep))
    return out


def check_rollout_fits(app: dict[str, Any], current: dict[str, Any], app_name: str, surge: int,
                       fits: Callable[[dict[str, Any], dict[str, Any]], Any], *, log: Any = log) -> bool:
    """``fits(app, current)`` (it raises ServeFitError), counting the surge replicas a start-before-stop code update
    runs at its peak (the old replicas run until the new ones do). Returns whether this is a stop-before-start code
    update (surge 0), which leaves the app dark while each new replica loads; logged with what it costs."""
    old = app_by_name(current, app_name)
    if not restarts_replicas(old, app):
        fits(app, current)
        return False
    if surge == 0:
        fits(app, current)
        running = replica_floor(((old or {}).get("deployments") or [{}])[0])
        log.warning(
            "surge_replicas is 0: stop-before-start. Serve stops the old replicas of %r in waves of "
            "max(20 %%, 1) before their replacements load the model, so with %s replica(s) the app has %s "
            "while each new replica starts (the time it takes is logged when the app is RUNNING).",
            app_name, running, "no serving replica" if running <= 1 else "fewer replicas",
        )
        return True
    try:
        fits(with_surge(app, surge), current)
    except ServeFitError as exc:
        raise ServeFitError(
            f"{exc} (This is a code update of a running app, so it rolls out start-before-stop with "
            f"{surge} surge replica(s) running beside the old ones; that peak is what does "
            "not fit. Add a worker, lower replicas, or set the surge_replicas Param to 0 for stop-before-start, "
            "which leaves the app without a serving replica while each new one loads its model.)"
        ) from None
    return False


def wait_for_apps(target: Target, app_names: list[str], timeout_s: float) -> dict[str, Any]:
    """Wait in this process until ``app_names`` are RUNNING (for steps that must finish a rollout before they
    return, such as a rollback): the target's deploy trigger's own condition and retry rule, through its
    blocking ``wait()``. Returns its event (``status`` success / failed / timeout, ``message``)."""
    return target.deploy_trigger(app_names=app_names, timeout_s=timeout_s).wait()


def apply_start_before_stop(
    target: Target, config: dict[str, Any], app_name: str, *, timeout_s: float, extra: int = ROLLOUT_SURGE_REPLICAS,
    read: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Apply ``config`` (built from ``read``, the cluster's config the caller read) with ``app_name`` rolling out
    start-before-stop (``max_surge_percent``) and wait until it is RUNNING (blocking); refused if the cluster's
    config changed since ``read``. Returns the trigger's event."""
    from raylift.release.writer import write_serve_config

    read = target.current_serve_config() if read is None else read
    app = app_by_name(config, app_name)
    if app is not None and extra > 0:
        config = merge_app(config, with_native_surge(app, extra), defaults=config)
    write_serve_config(target, config, read=read)
    return wait_for_apps(target, [app_name], timeout_s)
