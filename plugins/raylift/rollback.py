"""Put one Serve app back the way it was, leaving every other app alone."""

from __future__ import annotations

import logging
from typing import Any

from raylift.deploy_state import DeploymentState
from raylift.serve_config import app_by_name, merge_app
from raylift.targets.base import Target

log = logging.getLogger(__name__)


def restore_app(
    target: Target, state: DeploymentState, run_id: str, app_name: str, *, new_version_running: bool = True
) -> str:
    """Re-apply ``app_name`` from the last good config (or the pre-deploy one); returns what was done.

    ``new_version_running``: the failed version is RUNNING (a smoke test or gate failed), so going back
    restarts replicas: do it start-before-stop and wait for it. False after a failed deploy, where
    Serve never stopped the old replicas and going back to them is a lightweight update.
    """
    from raylift.config import DEPLOY_TIMEOUT_S
    from raylift.rollout import apply_start_before_stop

    saved, source = state.rollback_config(run_id)
    current = target.current_serve_config()
    app = app_by_name(saved, app_name) if saved else None
    if app is not None:
        restored = merge_app(current, app, defaults=saved or {})
        action = f"restored app {app_name!r} from the {source}"
    else:
        restored = dict(current)
        restored["applications"] = [a for a in current.get("applications", []) if a.get("name") != app_name]
        action = f"removed app {app_name!r} (it had no earlier good version: {source})"
    if app is not None and new_version_running:
        event = apply_start_before_stop(target, restored, app_name, timeout_s=DEPLOY_TIMEOUT_S, read=current)
        if event.get("status") != "success":
            action += f" (but it is not RUNNING yet: {event.get('message', event.get('status'))})"
    else:
        from raylift.serve_writer import write_serve_config

        write_serve_config(target, restored, read=current)
    log.warning("rollback: %s", action)
    return action


def restore_unproven(target: Target, state: DeploymentState, run_id: str, app_name: str) -> str:
    """Whatever failed after a deploy: if this run applied a config that was never recorded good and
    the app still runs this run's version, put the last good (or pre-deploy) app back.

    Idempotent: a step that already rolled back (a gate, a failed deploy) leaves nothing to do, and an
    app someone else changed since this run applied it is left alone (and said so), never reverted.
    """
    from raylift.rollout import restarts_replicas

    applied = state.applied(run_id)
    if applied is None:
        return f"nothing to roll back: run {run_id} applied no config for app {app_name!r}"
    if state.proven(run_id):
        return f"nothing to roll back: run {run_id}'s config for app {app_name!r} passed its gates"
    current = target.current_serve_config()
    now = app_by_name(current, app_name)
    ours = app_by_name(applied["config"], app_name)
    saved, source = state.rollback_config(run_id)
    back = app_by_name(saved, app_name) if saved else None
    if _same_app(now, back):
        return f"nothing to roll back: app {app_name!r} already runs the {source}"
    if now is None and back is None:
        return f"nothing to roll back: app {app_name!r} is not deployed, as before run {run_id}"
    if ours is None or now is None or restarts_replicas(ours, now):
        log.warning("rollback: app %r was changed by someone else since run %s applied it; left as it is",
                    app_name, run_id)
        return f"not rolled back: app {app_name!r} no longer runs what run {run_id} applied (changed since)"
    return restore_app(target, state, run_id, app_name, new_version_running=True)


def _same_app(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Equal, or the same code version with the same replica counts (however Serve echoes the config)."""
    from raylift.rollout import restarts_replicas

    if a == b:
        return True
    if a is None or b is None or restarts_replicas(a, b):
        return False

    def counts(app: dict[str, Any]) -> list[tuple[Any, ...]]:
        return sorted((str(d.get("name")), d.get("num_replicas"), repr(d.get("autoscaling_config")))
                      for d in app.get("deployments", []))

    return counts(a) == counts(b)

